"""What a handler receives beside its arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallContext:
    """Passed to every handler as ``ctx``; forward ``idempotency_key`` to the system called."""

    call_id: str
    idempotency_key: str
    attempt: int
    requested_by: str
    tool: str
