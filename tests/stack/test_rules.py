"""Rules over arguments on the real stack: ``rule_wire`` in ``tests/tools.yaml`` is gated
by CEL conditions over its arguments and its caller, and refuses blocked accounts."""

from __future__ import annotations

import dataclasses
from typing import Any

from router.approval import requests as pending
from router.approval.binding import binding_verifies
from router.runtime import Runtime

from ..support.audit import audit_events, audit_rows
from ..support.calls import decide, result, submit, submit_pending
from ..support.inbox import inbox_page, session_cookie, sign_in
from ..support.stack import Stack

WIRE = "rule_wire"
DENIED = "denied by rule deny_if: transfers to blocked accounts are refused"


def wire(stack: Stack, args: dict[str, Any], key: str = "agent") -> dict[str, Any]:
    with stack.client(key) as http:
        return submit(http, WIRE, args, wait_s=20)


def test_a_small_amount_runs_without_approval(stack: Stack) -> None:
    answer = wire(stack, {"amount": 500, "to": "bob"})
    assert answer["status"] == "succeeded", answer
    rows = audit_rows(stack, call_id=answer["call_id"])
    assert [row["event"] for row in rows] == ["queued", "ok"]
    assert "→ false" in rows[0]["detail"]["rule"]


def test_a_medium_amount_needs_one_approver(stack: Stack) -> None:
    call = submit_pending(stack, WIRE, args={"amount": 5000, "to": "bob"})
    decided = decide(stack, call["request_id"]).json()
    assert decided["approvals_required"] == 1 and decided["released"] is True, decided
    assert result(stack, call["call_id"])["status"] == "succeeded"


def test_a_large_amount_needs_two_distinct_approvers(stack: Stack) -> None:
    call = submit_pending(stack, WIRE, args={"amount": 20000, "to": "bob"})
    first = decide(stack, call["request_id"]).json()
    assert first["approvals"] == 1 and first["approvals_required"] == 2
    assert first["released"] is False
    assert decide(stack, call["request_id"]).status_code == 409  # the same approver again
    second = decide(stack, call["request_id"], key="approver2").json()
    assert second["released"] is True
    assert result(stack, call["call_id"])["status"] == "succeeded"


def test_the_exempt_caller_runs_a_medium_amount_ungated(stack: Stack) -> None:
    assert wire(stack, {"amount": 5000, "to": "bob"}, key="agent2")["status"] == "succeeded"


def test_deny_if_refuses_the_call_and_audits_it(stack: Stack) -> None:
    answer = wire(stack, {"amount": 5, "to": "blocked-account"})
    assert answer == {
        "ok": False,
        "tool": WIRE,
        "status": "denied",
        "error": DENIED,
        "denied": True,
    }
    rows = [r for r in audit_rows(stack, event="denied") if r["tool"] == WIRE]
    assert rows and rows[-1]["detail"]["error"] == DENIED
    assert rows[-1]["call_id"] is None and rows[-1]["actor"] == "agent"
    assert "deny_if: args.to in ['blocked-account'] → true" in rows[-1]["detail"]["rule"]


def test_a_missing_amount_fails_closed_to_two_approvers(stack: Stack) -> None:
    call = submit_pending(stack, WIRE, args={"to": "bob"})
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert request["approvals_required"] == 2
    assert "failed" in request["rule"] and "gated" in request["rule"]


def test_an_integer_beyond_64_bits_fails_the_rules_closed(stack: Stack) -> None:
    # CEL's integers are signed 64-bit: such arguments fail the rules closed, never 503.
    call = submit_pending(stack, WIRE, args={"amount": 2**63, "to": "bob", "x": [-(2**70)]})
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert request["approvals_required"] == 2
    assert "signed 64 bits" in request["rule"] and "gated" in request["rule"]


def test_a_bool_for_a_number_fails_the_rules_closed(stack: Stack) -> None:
    # cel-python's `true > 1000` is false: the call would run ungated without the check.
    call = submit_pending(stack, WIRE, args={"amount": True, "to": "bob"})
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert request["approvals_required"] == 2
    assert "args.amount > 1000 && caller != 'agent2' → failed" in request["rule"]


def test_the_rule_is_shown_with_the_request_in_the_api_the_audit_and_the_inbox(
    stack: Stack,
) -> None:
    call = submit_pending(stack, WIRE, args={"amount": 5000, "to": "bob"})
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    rule = request["rule"]
    assert rule.startswith(
        "requires_approval: args.amount > 1000 && caller != 'agent2' → true; "
    ), rule
    assert rule.endswith("approvals_required[1].when: true → true: 1 approval(s)"), rule
    assert audit_rows(stack, call_id=call["call_id"])[0]["detail"] == {"rule": rule}
    page = inbox_page(
        stack.base_url, session_cookie(sign_in(stack.base_url, stack.keys["approver"]))
    )
    assert page.status_code == 200
    assert "approvals_required[1].when: true → true: 1 approval(s)" in page.text
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending"]


def test_a_dry_run_explains_which_rule_applies(stack: Stack) -> None:
    def dry(args: dict[str, Any]) -> dict[str, Any]:
        with stack.client("agent") as http:
            response = http.post("/v1/calls", json={"tool": WIRE, "args": args, "dry_run": True})
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    large = dry({"amount": 20000, "to": "bob"})
    assert large["outcome"] == "pending"
    assert large["approval"]["approvals_required"] == 2
    assert [r["kind"] for r in large["approval"]["rules"]] == ["condition", "condition"]
    assert large["approval"]["rules"][1]["why"].startswith("approvals_required[0].when")
    small = dry({"amount": 5, "to": "bob"})
    assert small["outcome"] == "queued" and small["approval"]["required"] is False
    assert small["approval"]["rules"][0]["why"].endswith("→ false")
    denied = dry({"amount": 5, "to": "blocked-account"})
    assert denied["outcome"] == "refused"
    assert denied["refused"]["status"] == "denied" and denied["refused"]["error"] == DENIED


def test_the_rule_is_sealed_with_the_binding(stack: Stack) -> None:
    call = submit_pending(stack, WIRE, args={"amount": 5000, "to": "bob"})
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.reading() as conn:
            request = pending.get(conn, call["request_id"])
        assert request is not None and request.rule is not None
        assert binding_verifies(request, runtime.keyring)
        forged = dataclasses.replace(request, rule="requires_approval: false")
        assert not binding_verifies(forged, runtime.keyring)
    finally:
        runtime.close()
