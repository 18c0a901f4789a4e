"""An approval request as bound at issue time, its statuses, and the decisions on it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..status import NON_APPROVER_ROLES


class RequestStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# The longest reason a decision keeps, from the API, the inbox or the command line.
MAX_REASON_CHARS = 2000


class Decision(StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    CANCEL = "cancel"


def changed_since_read(args_sha256: str) -> str:
    """The refusal of a decision made on arguments that another approver has since edited."""
    return (
        f"the arguments changed since you read them (args_sha256 is now {args_sha256});"
        " nothing was decided"
    )


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One request, as bound at issue time."""

    id: str
    call_id: str
    tool: str
    args_sha256: str
    requested_by: str
    approvers: tuple[str, ...]
    approvals_required: int
    status: str
    created_at: int
    expires_at: int
    decided_at: int | None
    binding_mac: str | None = None
    release_mac: str | None = None
    # The rules that gated it, as text (``router.dispatch.gate``); sealed with the binding.
    rule: str | None = None
    # Set once an approver edited the arguments: the requester's hash, and who edited.
    original_args_sha256: str | None = None
    edited_by: str | None = None
    # How many times its arguments were edited: tells one edit's notice from the next.
    edits: int = 0

    @classmethod
    def from_row(cls, row: Any) -> ApprovalRequest:
        data = dict(row._mapping)
        data["approvers"] = tuple(json.loads(data["approvers"]))
        return cls(**data)

    def may_decide(self, name: str, roles: frozenset[str]) -> bool:
        """A key with one of the tool's approver roles, and never the requester."""
        return name != self.requested_by and approves_as(roles, self.approvers)


def approves_as(roles: frozenset[str], approvers: Iterable[str]) -> bool:
    """Whether ``roles`` hold one of ``approvers``. A request issued before its tool's
    config was refused may still name a built-in role: those decide nothing even so."""
    return bool((roles & set(approvers)) - NON_APPROVER_ROLES)
