"""The HTTP API's answers, read back into values: a status code and the body's bytes in,
``CallResult``, receipts and decisions out, or the caller's error raised.

Shared by ``Client`` and ``AsyncClient``, whatever library carried the answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, ParamSpec, TypeVar

from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotAuthenticated,
    NotFound,
    PayloadTooLarge,
    RequestError,
    Unavailable,
)
from ..results import CallResult, unavailable

P = ParamSpec("P")
T = TypeVar("T")

_ERRORS: dict[int, type[RequestError]] = {
    401: NotAuthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: BadRequest,
}
# Answers about a call that are still values (SPEC §4); other codes raise.
_CALL_VALUE_CODES = frozenset({200, 409, 413, 422, 503})
_DECISIONS = frozenset({"approved", "denied", "cancelled"})


@dataclass(frozen=True, slots=True)
class BatchReceipt:
    """What ``POST /v1/batches`` answered: ``rejected`` holds ``(index, error)`` pairs."""

    batch_id: str
    total: int
    accepted: int
    replayed: int
    rejected: tuple[tuple[int, str], ...]
    # ``(index, call_id)`` of replayed entries whose call the batch's results do not show.
    replayed_elsewhere: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """Counts of a batch's calls by status; ``done`` once none is queued, running or pending."""

    batch_id: str
    total: int
    counts: Mapping[str, int]
    rejected: int
    done: bool
    # Entries received over every request, replays included.
    submitted: int = 0


@dataclass(frozen=True, slots=True)
class Decided:
    """An approver's decision as the approval worker took it. With ``approve(wait_s=…)`` on
    a released call, ``result`` is the call's outcome."""

    status: str
    request_id: str | None
    call_id: str | None
    approvals: int | None = None
    approvals_required: int | None = None
    released: bool = False
    result: CallResult | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    tool: str
    score: float
    reason: str


@dataclass(frozen=True, slots=True)
class Routed:
    """Tools for a task, best first, and the strategy that ranked them; ``fallback`` says
    why the asked-for strategy (``llm``) was not used."""

    strategy: str
    candidates: list[Candidate]
    fallback: str | None = None


def json_of(body: bytes | str) -> Any:
    """The body as JSON, or None when it is not JSON."""
    try:
        return json.loads(body)
    # Nesting deeper than the parser recurses raises RecursionError, not ValueError.
    except (ValueError, RecursionError):
        return None


def raise_for(status: int, body: Any) -> NoReturn:
    """The caller's error as an exception from ``router.errors``."""
    message = body.get("error") if isinstance(body, dict) else None
    message = str(message or f"HTTP {status}")
    if status == 503:
        raise Unavailable(message.removeprefix("unavailable: "))
    raise _ERRORS.get(status, RequestError)(message)


def call_answer(status: int, body: bytes) -> CallResult:
    """An answer about a call: a value, except the caller's own mistakes (401, 403, 404)."""
    parsed = json_of(body)
    if status in _CALL_VALUE_CODES and isinstance(parsed, dict):
        return CallResult.from_dict(parsed, http_status=status)
    if status in (401, 403, 404):
        raise_for(status, parsed)
    return unavailable(f"HTTP {status} from the API")


def checked(status: int, body: bytes) -> dict[str, Any]:
    """Any other answer: its JSON object when it is a 200, else the caller's error."""
    parsed = json_of(body)
    if status != 200 or not isinstance(parsed, dict):
        raise_for(status, parsed)
    return parsed


def unreachable(exc: BaseException) -> str:
    """What went wrong on the way to the API, for ``unavailable`` and ``Unavailable``."""
    return f"cannot reach the API: {str(exc) or type(exc).__name__}"


def shaped(read: Callable[P, T]) -> Callable[P, T]:
    """``read`` of an answer, with an answer of another shape (a server that is not
    toolrouter's API, a proxy's page) raised as the caller's error, not a ``KeyError``."""

    @functools.wraps(read)
    def reading(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return read(*args, **kwargs)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise RequestError(
                f"the API's answer is not of the shape expected ({type(exc).__name__}: {exc})"
            ) from None

    return reading


@shaped
def receipt(body: dict[str, Any]) -> BatchReceipt:
    return BatchReceipt(
        batch_id=body["batch_id"],
        total=body["total"],
        accepted=body.get("accepted", 0),
        replayed=body.get("replayed", 0),
        rejected=tuple((r["index"], r["error"]) for r in body.get("rejected", [])),
        replayed_elsewhere=tuple(
            (r["index"], r["call_id"]) for r in body.get("replayed_elsewhere", [])
        ),
    )


@shaped
def batch_status(body: dict[str, Any]) -> BatchStatus:
    return BatchStatus(
        batch_id=body["batch_id"],
        total=body["total"],
        counts=dict(body["counts"]),
        rejected=body.get("rejected", 0),
        done=bool(body["done"]),
        submitted=body.get("submitted", 0),
    )


@shaped
def decided(body: dict[str, Any], request_id: str) -> Decided:
    if body.get("status") not in _DECISIONS:
        # approve(wait_s=…) on a released call answers with the call's result, which
        # does not count approvals.
        result = CallResult.from_dict(body)
        return Decided("approved", request_id, result.call_id, released=True, result=result)
    return Decided(
        status=body["status"],
        request_id=body.get("request_id"),
        call_id=body.get("call_id"),
        approvals=body.get("approvals"),
        approvals_required=body.get("approvals_required"),
        released=bool(body.get("released", False)),
    )


@shaped
def routed(body: dict[str, Any]) -> Routed:
    return Routed(
        strategy=body["strategy"],
        candidates=[
            Candidate(c["tool"], float(c["score"]), c["reason"]) for c in body["candidates"]
        ],
        fallback=body.get("fallback"),
    )


@shaped
def approval_requests(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(request) for request in body["requests"]]


@shaped
def result_line(line: bytes | str) -> tuple[int, CallResult] | None:
    """One line of a batch's NDJSON results as ``(index, result)``; None for a blank line."""
    if not line.strip():
        return None
    body = json.loads(line)
    return int(body.get("index", -1)), CallResult.from_dict(body)
