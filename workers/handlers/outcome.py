"""What one run of a handler produced, as data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from router.canonical import canonical_json, nested_deeper_than, storable_text, too_deep_message
from router.results import error_message

# The length of the ``error_type`` column.
ERROR_TYPE_MAX = 128
# The longest error message kept of a run: a handler's message may be of any size, and it
# is stored in the call's row and in its audit row.
ERROR_MAX = 4096
# The longest wait a service or handler may ask for before a retry; longer waits are cut
# to it (a retry scheduled past what a date can hold would fail the run that schedules it).
RETRY_AFTER_MAX_S = 24 * 3600.0
# A handler that returned a config secret outside any string: it ran, so the call ends
# there (no retry, no fallback would undo what it did).
SECRET_IN_RESULT = "SecretInResult"


@dataclass(frozen=True, slots=True)
class Outcome:
    """``value_json`` when the handler returned; ``error`` and ``error_type`` when it failed.
    ``content_json``: an MCP tool's content blocks, when ``value`` cannot carry them all."""

    ok: bool
    value_json: str | None = None
    content_json: str | None = None
    error: str | None = None
    error_type: str | None = None
    retryable: bool = False
    # From a 429/503's Retry-After: how long the service asked us to wait.
    retry_after_s: float | None = None
    # How long the handler ran, in ms; None for an outcome no handler gave here.
    ran_ms: int | None = None

    def __post_init__(self) -> None:
        # A handler's message may hold what no database stores (a NUL, a lone surrogate),
        # and its class a name longer than the column: stored as is, the outcome would be
        # lost and the call shown as interrupted.
        if self.error is not None and (error := storable_text(self.error)) is not self.error:
            object.__setattr__(self, "error", error)
        if self.error_type is not None:
            kind = storable_text(self.error_type)[:ERROR_TYPE_MAX]
            if kind != self.error_type:
                object.__setattr__(self, "error_type", kind)
        if self.retry_after_s is not None:
            object.__setattr__(self, "retry_after_s", _seconds(self.retry_after_s))

    @classmethod
    def of_value(
        cls,
        value: object,
        *,
        max_nesting: int,
        content: list[dict[str, Any]] | None = None,
        max_bytes: int | None = None,
    ) -> Outcome:
        # Whatever the handler returned (0, None, "" included) is a success, if it is JSON,
        # no deeper than every reader of the stored result can go and no larger than
        # ``max_bytes``; content blocks too.
        if nested_deeper_than(value, max_nesting) or nested_deeper_than(content, max_nesting):
            return cls.too_deep(max_nesting)
        try:
            value_json = canonical_json(value)
            content_json = None if content is None else canonical_json(content)
        except (TypeError, ValueError) as exc:
            return cls(
                ok=False,
                error=f"result is not JSON: {error_message(exc)}",
                error_type=type(exc).__name__,
            )
        if max_bytes is not None and len(value_json) + len(content_json or "") > max_bytes:
            return cls.too_large(max_bytes)
        return cls(ok=True, value_json=value_json, content_json=content_json)

    @classmethod
    def of_exception(cls, exc: BaseException, *, retryable: bool = False) -> Outcome:
        return cls(
            ok=False,
            error=error_message(exc),
            error_type=type(exc).__name__,
            retryable=retryable,
            retry_after_s=_asked_wait(exc),
        )

    @classmethod
    def too_deep(cls, max_nesting: int) -> Outcome:
        return cls(
            ok=False, error=too_deep_message("result", max_nesting), error_type="ResultTooDeep"
        )

    @classmethod
    def too_large(cls, max_bytes: int) -> Outcome:
        return cls(
            ok=False,
            error=f"result too large: over the limit of {max_bytes} bytes",
            error_type="ResultTooLarge",
        )

    @classmethod
    def timed_out(cls, timeout_s: float, *, retryable: bool = False) -> Outcome:
        return cls(
            ok=False,
            error=f"timeout after {timeout_s:g} s",
            error_type="TimeoutError",
            retryable=retryable,
        )


def _asked_wait(exc: BaseException) -> float | None:
    """The exception's ``retry_after_s``, if reading it raises nothing."""
    # BaseException on purpose: a handler's exception may compute it, and raise anything.
    try:
        return _seconds(getattr(exc, "retry_after_s", None))
    except BaseException:
        return None


def _seconds(value: object) -> float | None:
    """A wait as a number of seconds in ``[0, RETRY_AFTER_MAX_S]``; None if it is none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return float(min(max(0, value), RETRY_AFTER_MAX_S))
