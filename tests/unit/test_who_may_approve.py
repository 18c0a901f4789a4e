"""Who may list and decide approval requests: a key with an approver role, a custom one
(``finance``), or any role a tool names among its approvers, even ``agent``."""

from __future__ import annotations

from typing import cast

from router.approval.view import ApprovalsView
from router.auth.principal import Principal
from router.db.store import Store
from router.notify.escalation import recorded
from router.trust.keyring import KeyRing


def key(*roles: str) -> Principal:
    return Principal("k", frozenset(roles))


def test_approver_roles_are_every_role_but_agent_operator_and_admin() -> None:
    assert key("approver").is_approver and key("finance").is_approver
    assert key("agent", "intern").is_approver
    assert not key("agent").is_approver and not key("operator", "admin").is_approver


def test_a_role_a_tool_names_among_its_approvers_may_approve() -> None:
    view = ApprovalsView(
        cast(Store, None),
        KeyRing(b"k" * 32),
        escalations_of=recorded,
        approver_roles=frozenset({"approver", "agent"}),
    )
    assert view.may_approve(key("agent"))
    assert view.may_approve(key("finance"))
    assert not view.may_approve(key("operator"))
    plain = ApprovalsView(
        cast(Store, None),
        KeyRing(b"k" * 32),
        escalations_of=recorded,
        approver_roles=frozenset({"approver"}),
    )
    assert not plain.may_approve(key("agent"))
