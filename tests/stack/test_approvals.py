"""Approvals through the real API and the real approval worker process."""

from __future__ import annotations

from ..support.audit import audit_events, audit_total
from ..support.calls import decide, result, submit_pending
from ..support.stack import Stack


def test_approved_call_runs_and_the_log_shows_pending_approved_ok(stack: Stack) -> None:
    call = submit_pending(stack, args={"to": "bob"})
    response = decide(stack, call["request_id"], reason="checked")
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "status": "approved",
        "request_id": call["request_id"],
        "call_id": call["call_id"],
        "approvals": 1,
        "approvals_required": 1,
        "released": True,
    }
    outcome = result(stack, call["call_id"])
    assert outcome == {
        "ok": True,
        "call_id": call["call_id"],
        "tool": "high_echo",
        "status": "succeeded",
        "value": {"to": "bob"},
    }
    events = audit_events(stack, call["call_id"])
    assert [e for e, _ in events] == ["pending", "approved", "ok"]
    assert events[1][1] == "approver"


def test_approve_with_wait_answers_with_the_call_result(stack: Stack) -> None:
    call = submit_pending(stack)
    response = decide(stack, call["request_id"], wait_s=20)
    assert response.json() == {
        "ok": True,
        "call_id": call["call_id"],
        "tool": "high_echo",
        "status": "succeeded",
        "value": {"n": 1},
    }


def test_replayed_and_never_issued_ids_are_404_and_leave_no_audit_row(stack: Stack) -> None:
    call = submit_pending(stack)
    assert decide(stack, call["request_id"]).status_code == 200
    before = audit_total(stack)
    for request_id in [call["request_id"], "req-" + "f" * 32]:
        for decision in ("approve", "deny"):
            response = decide(stack, request_id, decision)
            assert response.status_code == 404
            assert response.json() == {"ok": False, "error": f"unknown request: {request_id}"}
    for bad in ["x", "req-", "req-" + "z" * 9996]:
        response = decide(stack, bad)
        assert response.status_code == 404
        assert response.json()["error"].startswith("unknown request: ")
    assert audit_total(stack) == before


def test_deny_ends_the_call_denied(stack: Stack) -> None:
    call = submit_pending(stack)
    response = decide(stack, call["request_id"], "deny", reason="not today")
    assert response.json() == {
        "ok": True,
        "status": "denied",
        "request_id": call["request_id"],
        "call_id": call["call_id"],
        "released": False,
    }
    assert result(stack, call["call_id"], 0) == {
        "ok": False,
        "call_id": call["call_id"],
        "tool": "high_echo",
        "status": "denied",
        "denied": True,
        "request_id": call["request_id"],
    }
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending", "denied"]


def test_requester_cannot_approve_own_request(stack: Stack) -> None:
    call = submit_pending(stack, key="approving_agent")
    response = decide(stack, call["request_id"], key="approving_agent")
    assert response.status_code == 403
    assert response.json() == {"ok": False, "error": "requester cannot approve own request"}


def test_only_keys_with_the_tools_approver_role_decide(stack: Stack) -> None:
    call = submit_pending(stack, tool="finance_wire")
    for key in ("approver", "operator", "agent2", "admin"):
        assert decide(stack, call["request_id"], key=key).status_code == 403
    assert decide(stack, call["request_id"], key="finance").json()["released"] is True


def test_two_approvers_are_needed_for_a_two_man_tool(stack: Stack) -> None:
    call = submit_pending(stack, tool="two_man")
    first = decide(stack, call["request_id"]).json()
    assert (first["released"], first["approvals"], first["approvals_required"]) == (False, 1, 2)
    assert decide(stack, call["request_id"]).status_code == 409
    assert result(stack, call["call_id"], 0)["status"] == "pending"
    second = decide(stack, call["request_id"], key="approver2", wait_s=20)
    assert second.json()["status"] == "succeeded"
    assert [e for e, _ in audit_events(stack, call["call_id"])] == [
        "pending",
        "approved",
        "approved",
        "ok",
    ]


def test_approved_call_whose_handler_raises_logs_error_and_stays_spent(stack: Stack) -> None:
    call = submit_pending(stack, tool="gated_error")
    outcome = decide(stack, call["request_id"], wait_s=20).json()
    assert outcome == {
        "ok": False,
        "call_id": call["call_id"],
        "tool": "gated_error",
        "status": "failed",
        "error": "insufficient funds",
        "error_type": "ValueError",
    }
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending", "approved", "error"]
    assert decide(stack, call["request_id"]).status_code == 404


def test_expired_request_is_409(stack: Stack) -> None:
    call = submit_pending(stack, tool="quick_expiry")
    with stack.client("approver") as http:
        deadline_reached = False
        for _ in range(100):
            response = http.post(f"/v1/approvals/{call['request_id']}/approve")
            if response.status_code == 409:
                deadline_reached = True
                break
            assert response.status_code == 200 and response.json()["released"], response.text
            return  # approved before the one-second expiry: nothing more to check here
    assert deadline_reached
    assert response.json() == {"ok": False, "error": f"expired request: {call['request_id']}"}


def test_approvers_see_what_they_may_decide(stack: Stack) -> None:
    call = submit_pending(stack, args={"amount": 5})
    finance_call = submit_pending(stack, tool="finance_wire")
    with stack.client("approver") as http:
        listed = http.get("/v1/approvals").json()["requests"]
    mine = {item["request_id"]: item for item in listed}
    assert call["request_id"] in mine and finance_call["request_id"] not in mine
    item = mine[call["request_id"]]
    assert item["args"] == {"amount": 5}
    assert item["requested_by"] == "agent" and item["tool"] == "high_echo"
    assert item["expires_in_ms"] > 0 and item["age_ms"] >= 0
    with stack.client("finance") as http:
        finance_ids = {i["request_id"] for i in http.get("/v1/approvals").json()["requests"]}
    assert finance_call["request_id"] in finance_ids and call["request_id"] not in finance_ids
    with stack.client("agent2") as http:
        assert http.get("/v1/approvals").status_code == 403
        assert http.get(f"/v1/approvals/{call['request_id']}").status_code == 404
    decide(stack, call["request_id"], reason="fine")
    with stack.client("operator") as http:
        detail = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert detail["status"] == "approved"
    assert [(d["approver"], d["decision"], d["reason"]) for d in detail["decisions"]] == [
        ("approver", "approve", "fine")
    ]


def test_requester_cancels_a_pending_call(stack: Stack) -> None:
    call = submit_pending(stack)
    with stack.client("agent") as http:
        response = http.delete(f"/v1/calls/{call['call_id']}")
    assert response.json()["status"] == "cancelled"
    assert decide(stack, call["request_id"]).status_code == 404
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending", "cancelled"]


def test_a_decision_the_approver_was_told_failed_is_never_applied(stack: Stack) -> None:
    call = submit_pending(stack)
    stack.stop("approvals")
    try:
        response = decide(stack, call["request_id"])
        assert response.status_code == 503
        assert response.json()["error"].startswith("unavailable: approval worker did not answer")
    finally:
        stack.start_worker(name="approvals", queues="approvals,maintenance", concurrency=1)
    # The restarted worker sees the expired message and drops it; a fresh decision still works.
    answer = decide(stack, call["request_id"], wait_s=20).json()
    assert answer.get("status") == "succeeded", answer
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending", "approved", "ok"]


def test_beat_expires_a_request_nobody_decided(stack: Stack) -> None:
    from router.cli import processes

    call = submit_pending(stack, tool="quick_expiry")
    stack.start("beat", processes.beat_argv(stack.settings))
    try:
        outcome = result(stack, call["call_id"], wait_s=30)
    finally:
        stack.stop("beat")
    assert outcome == {
        "ok": False,
        "call_id": call["call_id"],
        "tool": "quick_expiry",
        "status": "expired",
        "expired": True,
        "request_id": call["request_id"],
    }
    assert audit_events(stack, call["call_id"]) == [("pending", "agent"), ("expired", "expiry")]
    response = decide(stack, call["request_id"])
    assert response.status_code == 409
    assert response.json() == {"ok": False, "error": f"expired request: {call['request_id']}"}
