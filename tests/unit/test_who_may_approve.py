"""Who may list and decide approval requests: a key with an approver role, ``approver`` or
a custom one (``finance``). ``agent``, ``operator`` and ``admin`` decide nothing (SPEC §9):
a tool naming one among its approvers is a config error, and a request that names one
(issued under an older config) is still decided by none of them."""

from __future__ import annotations

import pytest

from router.approval.model import ApprovalRequest
from router.auth.principal import Principal
from router.errors import ConfigError
from router.tools.config import parse_config
from router.tools.registry import ToolRegistry


def key(*roles: str) -> Principal:
    return Principal("k", frozenset(roles))


def test_approver_roles_are_every_role_but_agent_operator_and_admin() -> None:
    assert key("approver").is_approver and key("finance").is_approver
    assert key("agent", "intern").is_approver
    assert not key("agent").is_approver and not key("operator", "admin").is_approver


@pytest.mark.parametrize(
    ("approvers", "named"),
    [
        ("[operator]", "'operator'"),
        ("[approver, agent]", "'agent'"),
        ("[admin, operator, finance]", "'admin', 'operator'"),
    ],
)
def test_a_tool_naming_a_built_in_role_among_its_approvers_is_a_config_error(
    approvers: str, named: str
) -> None:
    text = (
        'tools:\n  - {name: pay, handler: "tests.fixture_tools:echo", risk: high,'
        f" approvers: {approvers}}}\n"
    )
    with pytest.raises(ConfigError) as raised:
        ToolRegistry.from_config(parse_config(text, file="t.yaml", env={}), file="t.yaml")
    assert raised.value.tool == "pay"
    assert raised.value.reason == (
        f"approvers cannot name {named}: agent, operator and admin keys decide nothing;"
        " name an approver role (approver, or one such as finance)"
    )


def request_naming(*approvers: str) -> ApprovalRequest:
    return ApprovalRequest(
        id="r",
        call_id="c",
        tool="pay",
        args_sha256="0" * 64,
        requested_by="agent-a",
        approvers=approvers,
        approvals_required=1,
        status="pending",
        created_at=0,
        expires_at=1,
        decided_at=None,
    )


def test_a_request_naming_a_built_in_role_is_decided_by_its_approver_roles_alone() -> None:
    request = request_naming("operator", "agent", "finance")
    assert not request.may_decide("ops", frozenset({"operator"}))
    assert not request.may_decide("agent-b", frozenset({"agent"}))
    assert not request.may_decide("root", frozenset({"admin", "operator"}))
    assert request.may_decide("fin", frozenset({"finance", "agent"}))
    assert not request.may_decide("agent-a", frozenset({"finance"}))
