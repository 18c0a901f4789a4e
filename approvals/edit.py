"""An approver's edit of a pending call's arguments, applied under the request's row lock.

The edited arguments pass every check a submission passes (the tool's input schema, the
size and nesting limits) and the tool's rules are evaluated again on them: ``deny_if``
refuses the edit, a larger ``approvals_required`` raises the request's count, and an edit
the rules would not gate stays gated (the approval under way is what lets it run). The
count never drops. Approvals given before the edit are forgotten: they approved other
arguments. The call keeps its requester's arguments beside the edited ones, and the
request's binding is sealed again over the edited hash, so the release covers exactly the
arguments that will run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.approval import requests as pending
from router.approval.model import ApprovalRequest
from router.dispatch.checks import EditRefused
from router.runtime import Runtime

# How a request's rule reads when the rules would not gate the edited arguments.
KEPT_GATED = "edited arguments not gated by the rules: kept gated by this approval"


@dataclass(frozen=True, slots=True)
class Edit:
    """An applied edit: the request as now bound, and the approvers whose approval it undid."""

    request: ApprovalRequest
    forgotten: tuple[str, ...]


def apply_edit(
    runtime: Runtime, conn: Any, request: ApprovalRequest, editor: str, args: Any, *, now: int
) -> Edit | EditRefused | None:
    """Bind ``request`` and its call to ``args``; None when they are the arguments already
    bound (no edit). The caller holds the request's row lock and has checked its binding."""
    checked = runtime.dispatcher.checks.check_edit(request.requested_by, request.tool, args)
    if isinstance(checked, EditRefused):
        return checked
    if checked.digest == request.args_sha256:
        return None
    gate = checked.ruling.gate
    if gate is not None:
        required = max(request.approvals_required, gate.approvals_required)
        rule = gate.rule_text
    else:
        required = request.approvals_required
        rule = f"{request.rule}; {KEPT_GATED}" if request.rule else KEPT_GATED
    call = runtime.store.get(conn, request.call_id)
    if call is None or not runtime.store.edit_pending(
        conn, call, checked.canonical, checked.digest, editor, now=now
    ):
        raise RuntimeError("call changed under its request's row lock")
    edited, forgotten = pending.edit(
        conn,
        request,
        args_sha256=checked.digest,
        editor=editor,
        approvals_required=required,
        rule=rule,
        keyring=runtime.keyring,
    )
    return Edit(edited, tuple(forgotten))


def edited_detail(request: ApprovalRequest, edit: Edit) -> dict[str, Any]:
    """What an approval that edited the arguments adds to its audit row."""
    return {
        "edited_by": request.edited_by,
        "args_sha256": request.args_sha256,
        "original_args_sha256": request.original_args_sha256,
        "approvals_reset": list(edit.forgotten),
    }
