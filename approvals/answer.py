"""What the approval gate answers a decision: sent back to the API as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAST_DEADLINE = "unavailable: decision arrived after its deadline; not applied"


@dataclass(frozen=True, slots=True)
class Answer:
    """The gate's answer to one decision, sent back to the API as JSON."""

    ok: bool
    http_status: int = 200
    status: str | None = None
    error: str | None = None
    request_id: str | None = None
    call_id: str | None = None
    approvals: int | None = None
    approvals_required: int | None = None
    released: bool = False
    # Set when this approval edited the arguments: the hash now bound.
    args_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in {
                "ok": self.ok,
                "http_status": self.http_status,
                "status": self.status,
                "error": self.error,
                "request_id": self.request_id,
                "call_id": self.call_id,
                "approvals": self.approvals,
                "approvals_required": self.approvals_required,
                "released": self.released,
                "edited": True if self.args_sha256 else None,
                "args_sha256": self.args_sha256,
            }.items()
            if value is not None
        }


class PastDeadline(Exception):
    """A decision's transaction reached its deadline before its commit: rolled back."""


def refusal(http_status: int, error: str) -> Answer:
    return Answer(ok=False, http_status=http_status, error=error)
