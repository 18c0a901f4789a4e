"""Outcomes as values: every answer about a call is a ``CallResult`` (SPEC §4).

``ok`` is true exactly when there is a value. Failures are data, never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .status import ACTIVE_STATES, CallStatus

REJECTED = "rejected"


class Refusal(StrEnum):
    """Answers where the service refused to take the call at all: only ``ok`` and
    ``error`` go on the wire, with the HTTP code saying which."""

    UNAVAILABLE = "unavailable"
    CONFLICT = "conflict"
    BAD_REQUEST = "bad_request"


REFUSALS = frozenset(Refusal)
_REFUSAL_BY_CODE = {
    409: Refusal.CONFLICT,
    413: Refusal.BAD_REQUEST,
    422: Refusal.BAD_REQUEST,
    503: Refusal.UNAVAILABLE,
}


@dataclass(frozen=True, slots=True)
class CallResult:
    """One answer about one call. ``status`` is a ``CallStatus`` or ``"rejected"``."""

    status: str
    tool: str | None
    call_id: str | None = None
    value: Any = None
    # MCP content blocks in their wire form, when an imported MCP tool gave more than plain
    # text: ``value`` alone would lose them.
    content: list[dict[str, Any]] | None = None
    error: str | None = None
    error_type: str | None = None
    request_id: str | None = None
    # Set when a fallback answered instead of the tool called.
    answered_by: str | None = None
    # For an unknown tool: registered names close to the one asked for.
    did_you_mean: tuple[str, ...] = ()
    http_status: int = 200
    # Set when an approver edited the arguments: who did, and the arguments as edited.
    edited_by: str | None = None
    args: Any = None

    @property
    def ok(self) -> bool:
        return self.status == CallStatus.SUCCEEDED

    @property
    def pending(self) -> bool:
        return self.status == CallStatus.PENDING

    @property
    def denied(self) -> bool:
        return self.status == CallStatus.DENIED

    @property
    def expired(self) -> bool:
        return self.status == CallStatus.EXPIRED

    @property
    def terminal(self) -> bool:
        """True once the call can change no more (and for answers that were never calls)."""
        return self.status not in ACTIVE_STATES

    @classmethod
    def from_dict(cls, body: dict[str, Any], *, http_status: int = 200) -> CallResult:
        """A wire answer back into a value (the Python client's half of ``to_dict``)."""
        status: str | None = body.get("status")
        if not isinstance(status, str):
            # ``{"ok": false, "error"}``: the service refused to take the call.
            status = _REFUSAL_BY_CODE.get(http_status, Refusal.UNAVAILABLE)
        return cls(
            status=status,
            tool=body.get("tool"),
            call_id=body.get("call_id"),
            value=body.get("value"),
            content=content_blocks(body.get("content")),
            error=body.get("error"),
            error_type=body.get("error_type"),
            request_id=body.get("request_id"),
            did_you_mean=tuple(body.get("did_you_mean") or ()),
            http_status=http_status,
            edited_by=body.get("edited_by") if body.get("edited") else None,
            args=body.get("args") if body.get("edited") else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The wire shape, with exactly the fields SPEC §4 names for this status."""
        if self.status in REFUSALS:
            return {"ok": False, "error": self.error}
        body: dict[str, Any] = {"ok": self.ok}
        if self.call_id is not None:
            body["call_id"] = self.call_id
        body["tool"] = self.tool
        body["status"] = self.status
        if self.answered_by is not None and self.answered_by != self.tool:
            body["answered_by"] = self.answered_by
        if self.edited_by is not None:
            # The requester learns that what ran is not what they sent.
            body.update(edited=True, args=self.args, edited_by=self.edited_by)
        if self.ok:
            body["value"] = self.value
            if self.content is not None:
                body["content"] = self.content
            return body
        if self.error is not None:
            body["error"] = self.error
        if self.error_type is not None:
            body["error_type"] = self.error_type
        if self.did_you_mean:
            body["did_you_mean"] = list(self.did_you_mean)
        flag = _FLAGS.get(self.status)
        if flag:
            # Only the approval outcomes name their request (SPEC §4 shapes).
            body[flag] = True
            if self.request_id is not None:
                body["request_id"] = self.request_id
        return body


_FLAGS: dict[str, str] = {
    CallStatus.PENDING: "pending",
    CallStatus.DENIED: "denied",
    CallStatus.EXPIRED: "expired",
}


def content_blocks(raw: Any) -> list[dict[str, Any]] | None:
    """``raw`` if it is a list of objects (content blocks as stored or sent), else None."""
    if isinstance(raw, list) and all(isinstance(block, dict) for block in raw):
        return raw
    return None


def rejected(tool: str | None, error: str, *, did_you_mean: tuple[str, ...] = ()) -> CallResult:
    return CallResult(status=REJECTED, tool=tool, error=error, did_you_mean=did_you_mean)


# A request the API cannot finish because it is stopping (a submission waiting for its
# group, a wait cut short by the server's graceful stop).
SHUTTING_DOWN = "the API is shutting down"


def unavailable(message: str, *, tool: str | None = None) -> CallResult:
    text = message if message.startswith("unavailable: ") else f"unavailable: {message}"
    return CallResult(status=Refusal.UNAVAILABLE, tool=tool, error=text, http_status=503)


def bad_request(error: str, *, tool: str | None = None, http_status: int = 422) -> CallResult:
    """A request the service cannot take as sent (422), or one too large (413)."""
    return CallResult(status=Refusal.BAD_REQUEST, tool=tool, error=error, http_status=http_status)


def conflict(error: str, *, tool: str | None = None) -> CallResult:
    return CallResult(status=Refusal.CONFLICT, tool=tool, error=error, http_status=409)


def internal_error(exc: BaseException) -> str:
    """What a caller is told of a bug: its class alone. Its message may hold SQL, values
    or paths; the log has the traceback."""
    return f"internal error ({type(exc).__name__})"


def error_message(exc: BaseException) -> str:
    """The raiser's own message: ``str(exc)``, a ``KeyError``'s key, else the class name."""
    try:
        if isinstance(exc, KeyError) and len(exc.args) == 1:
            message = str(exc.args[0])
        else:
            message = str(exc)
    # BaseException on purpose: a handler's exception whose ``__str__`` raises (even
    # SystemExit) still fails only its call, named by its class.
    except BaseException:
        message = ""
    return message or type(exc).__name__
