"""Calls as the database holds them, and how one attempt of a call ended."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..results import CallResult, content_blocks
from ..status import CallStatus


@dataclass(frozen=True, slots=True)
class Fence:
    """Which claim of a call a change belongs to: its attempt number and when it was
    claimed. A claim undone by a database crash and made again has the same attempt
    number as the run it left going; the time tells the two apart."""

    attempt: int
    claimed_at: int | None


@dataclass(frozen=True, slots=True)
class CallMade:
    """What a stored call is a call of: its tool and its arguments' digest, and the
    requester's own digest where an approver edited the arguments."""

    tool: str
    args_sha256: str
    original_args_sha256: str | None = None

    def is_call(self, tool: str, digest: str | None) -> bool:
        """Whether ``tool`` with arguments of ``digest`` is this call sent again, with the
        requester's arguments or the approver's edit of them."""
        if digest is None or tool != self.tool:
            return False
        return digest in (self.args_sha256, self.original_args_sha256)


@dataclass(frozen=True, slots=True)
class CallRow:
    """A stored call, as read from the database."""

    id: str
    tool: str
    risk: str
    args: str
    args_sha256: str
    status: str
    requested_by: str
    idempotency_key: str | None
    attempt: int
    lease_until: int | None
    created_at: int
    updated_at: int
    published_at: int | None
    started_at: int | None
    finished_at: int | None
    value: str | None
    error: str | None
    error_type: str | None
    request_id: str | None
    batch_id: str | None
    batch_index: int | None
    answered_by: str | None = None
    chain: str | None = None
    content: str | None = None
    # The requester's own arguments, when an approver edited them (``approvals.gate``).
    original_args: str | None = None
    original_args_sha256: str | None = None
    edited_by: str | None = None
    cached: int | None = None

    @classmethod
    def from_row(cls, row: Any) -> CallRow:
        return cls(**dict(row._mapping))

    @classmethod
    def from_mapping(cls, row: dict[str, Any] | None) -> CallRow | None:
        return cls(**row) if row is not None else None

    @property
    def made(self) -> CallMade:
        return CallMade(self.tool, self.args_sha256, self.original_args_sha256)

    @property
    def fence(self) -> Fence:
        return Fence(self.attempt, self.started_at)

    @property
    def arguments(self) -> Any:
        return json.loads(self.args)

    def result(self) -> CallResult:
        """The call's answer as the API gives it (SPEC §4)."""
        value = json.loads(self.value) if self.value is not None else None
        content = json.loads(self.content) if self.content is not None else None
        return CallResult(
            status=self.status,
            tool=self.tool,
            call_id=self.id,
            value=value,
            content=content_blocks(content),
            error=self.error,
            error_type=self.error_type,
            request_id=self.request_id,
            answered_by=self.answered_by,
            edited_by=self.edited_by,
            args=self.arguments if self.edited_by is not None else None,
        )


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How the claim ``fence`` of a call ended, for ``Store.finish``."""

    call_id: str
    fence: Fence
    status: CallStatus
    at: int
    value: str | None = None
    content: str | None = None
    error: str | None = None
    error_type: str | None = None
    answered_by: str | None = None
    cached: bool = False
