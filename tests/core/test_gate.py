"""The approval gate in-process: spend once, exact times, N-of-M, expiry, deadlines, races."""

from __future__ import annotations

import threading

import pytest
import redis
from sqlalchemy import select, text

from approvals.gate import Gate
from router.audit import log as audit
from router.auth.principal import Principal
from router.clock import FakeClock
from router.db.schema import audit_log
from router.dispatch.checks import EditRefused
from router.runtime import Runtime
from workers.execution import Executor

APPROVER = frozenset({"approver"})


# The keys that decide in these tests, by name, with their roles: the gate reads them
# from the database, whatever a decision message might say.
DECIDERS = {
    "approver": ["approver"],
    "approver2": ["approver"],
    "approver3": ["approver"],
    "operator": ["operator"],
    "cfo": ["finance"],
    "agent": ["agent"],
    "agent2": ["agent"],
    "approving_agent": ["agent", "approver"],
    **{f"approver-{i}": ["approver"] for i in range(32)},
}


@pytest.fixture(autouse=True)
def _deciders(runtime: Runtime) -> None:
    for name, roles in DECIDERS.items():
        runtime.keys.create(name, roles)


def gate_for(runtime: Runtime) -> Gate:
    return Gate(runtime, runtime.notifier())


def events(runtime: Runtime, call_id: str) -> list[tuple[str, int, str]]:
    with runtime.store.reading() as conn:
        rows = audit.query(conn, call_id=call_id, limit=100)
    return [(row["event"], row["at"], row["actor"]) for row in rows]


def audit_count(runtime: Runtime) -> int:
    with runtime.store.reading() as conn:
        return len(conn.execute(select(audit_log.c.seq)).all())


def submit_gated(runtime: Runtime, tool: str = "high_echo", who: str = "agent") -> tuple[str, str]:
    result = runtime.dispatcher.submit(who, tool, {"n": 1})
    assert result.status == "pending", result
    assert result.call_id is not None and result.request_id is not None
    return result.call_id, result.request_id


def call_status(runtime: Runtime, call_id: str) -> str:
    return runtime.calls.read(call_id).status


def queue_length(runtime: Runtime, queue: str = "tools.high") -> int:
    return int(redis.Redis.from_url(runtime.redis_url).llen(runtime.namespace.prefix + queue))


def test_gated_call_is_logged_pending_then_approved_with_the_exact_gap(
    runtime: Runtime, clock: FakeClock
) -> None:
    t0 = clock.now
    call_id, request_id = submit_gated(runtime)
    clock.advance(120_000)
    answer = gate_for(runtime).decide(request_id, "approver", "approve", "looks fine")
    assert answer.ok and answer.status == "approved" and answer.released
    assert events(runtime, call_id) == [
        ("pending", t0, "agent"),
        ("approved", t0 + 120_000, "approver"),
    ]
    assert call_status(runtime, call_id) == "queued"
    assert queue_length(runtime) == 1


def test_two_identical_calls_get_two_requests(runtime: Runtime) -> None:
    first = submit_gated(runtime)
    second = submit_gated(runtime)
    assert first[1] != second[1]
    gate = gate_for(runtime)
    assert gate.decide(first[1], "approver", "approve").released
    # Approving the first never releases the second.
    assert call_status(runtime, second[0]) == "pending"


def test_replay_and_never_issued_ids_are_unknown_and_not_audited(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime)
    gate = gate_for(runtime)
    assert gate.decide(request_id, "approver", "approve").ok
    before = audit_count(runtime)
    for decision in ("approve", "deny"):
        replay = gate.decide(request_id, "approver2", decision)
        assert (replay.ok, replay.http_status, replay.error) == (
            False,
            404,
            f"unknown request: {request_id}",
        )
    never = "req-" + "0" * 32
    assert gate.decide(never, "approver", "deny").error == f"unknown request: {never}"
    assert audit_count(runtime) == before


def test_deny_is_the_same_shape_with_the_opposite_answer(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime)
    answer = gate_for(runtime).decide(request_id, "approver", "deny", "no")
    assert answer.to_dict() == {
        "ok": True,
        "http_status": 200,
        "status": "denied",
        "request_id": request_id,
        "call_id": call_id,
        "released": False,
    }
    result = runtime.calls.read(call_id).result().to_dict()
    assert result == {
        "ok": False,
        "call_id": call_id,
        "tool": "high_echo",
        "status": "denied",
        "denied": True,
        "request_id": request_id,
    }
    assert [e[0] for e in events(runtime, call_id)] == ["pending", "denied"]
    assert queue_length(runtime) == 0


def test_requester_cannot_approve_own_request(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime, who="approving_agent")
    answer = gate_for(runtime).decide(request_id, "approving_agent", "approve")
    assert (answer.http_status, answer.error) == (403, "requester cannot approve own request")


def test_only_the_tools_approver_roles_may_decide(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime, tool="finance_wire")
    gate = gate_for(runtime)
    assert gate.decide(request_id, "approver", "approve").http_status == 403
    assert gate.decide(request_id, "operator", "approve").http_status == 403
    assert gate.decide(request_id, "cfo", "approve").released


def test_n_of_m_needs_distinct_approvers_and_releases_on_the_nth(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime, tool="two_man")
    gate = gate_for(runtime)
    first = gate.decide(request_id, "approver", "approve")
    assert (first.ok, first.released, first.approvals, first.approvals_required) == (
        True,
        False,
        1,
        2,
    )
    again = gate.decide(request_id, "approver", "approve")
    assert again.http_status == 409
    assert call_status(runtime, call_id) == "pending"
    second = gate.decide(request_id, "approver2", "approve")
    assert (second.released, second.approvals) == (True, 2)
    assert [e[0] for e in events(runtime, call_id)] == ["pending", "approved", "approved"]
    assert queue_length(runtime) == 1


def test_an_approver_revoked_before_the_nth_approval_no_longer_counts(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime, tool="two_man")
    gate = gate_for(runtime)
    assert gate.decide(request_id, "approver", "approve").approvals == 1
    runtime.keys.revoke("approver")

    second = gate.decide(request_id, "approver2", "approve")

    assert (second.released, second.approvals) == (False, 1)
    assert call_status(runtime, call_id) == "pending"
    # What approvers see says so: the revoked key's approval is listed, and does not count.
    shown = runtime.approvals_view.get(Principal("operator", frozenset({"operator"})), request_id)
    assert [(d["approver"], d.get("counts", True)) for d in shown["decisions"]] == [
        ("approver", False),
        ("approver2", True),
    ]
    third = gate.decide(request_id, "approver3", "approve")
    assert (third.released, third.approvals) == (True, 2)
    assert queue_length(runtime) == 1


def test_one_denial_ends_an_n_of_m_request(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime, tool="two_man")
    gate = gate_for(runtime)
    assert gate.decide(request_id, "approver", "approve").ok
    assert gate.decide(request_id, "approver2", "deny").status == "denied"
    assert call_status(runtime, call_id) == "denied"
    assert gate.decide(request_id, "approver3", "approve").http_status == 404


def test_expiry_is_its_own_outcome(runtime: Runtime, clock: FakeClock) -> None:
    call_id, request_id = submit_gated(runtime, tool="quick_expiry")
    gate = gate_for(runtime)
    assert gate.expire_due() == 0
    clock.advance(1_000)
    late = gate.decide(request_id, "approver", "approve")
    assert (late.http_status, late.error) == (409, f"expired request: {request_id}")
    assert gate.expire_due() == 1
    result = runtime.calls.read(call_id).result().to_dict()
    assert result == {
        "ok": False,
        "call_id": call_id,
        "tool": "quick_expiry",
        "status": "expired",
        "expired": True,
        "request_id": request_id,
    }
    assert [e[0] for e in events(runtime, call_id)] == ["pending", "expired"]
    again = gate.decide(request_id, "approver", "approve")
    assert again.error == f"expired request: {request_id}"
    assert gate.expire_due() == 0


def test_a_decision_that_won_leaves_nothing_for_the_sweep(
    runtime: Runtime, clock: FakeClock
) -> None:
    call_id, request_id = submit_gated(runtime, tool="quick_expiry")
    gate = gate_for(runtime)
    clock.advance(999)
    assert gate.decide(request_id, "approver", "approve").released
    clock.advance(10_000)
    assert gate.expire_due() == 0
    assert call_status(runtime, call_id) == "queued"


def test_a_decision_past_its_deadline_is_never_applied(runtime: Runtime, clock: FakeClock) -> None:
    call_id, request_id = submit_gated(runtime)
    answer = gate_for(runtime).decide(request_id, "approver", "approve", deadline_ms=clock.now - 1)
    assert answer.http_status == 503
    assert call_status(runtime, call_id) == "pending"
    assert [e[0] for e in events(runtime, call_id)] == ["pending"]


def test_requester_cancels_a_pending_call_through_the_gate(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime)
    gate = gate_for(runtime)
    assert gate.decide(request_id, "agent2", "cancel").http_status == 404
    assert gate.decide(request_id, "agent", "cancel").status == "cancelled"
    assert call_status(runtime, call_id) == "cancelled"
    assert gate.decide(request_id, "approver", "approve").http_status == 404


@pytest.mark.parametrize("round_", range(3))
def test_32_concurrent_approvers_release_exactly_once(runtime: Runtime, round_: int) -> None:
    call_id, request_id = submit_gated(runtime)
    gate = gate_for(runtime)
    answers = []
    start = threading.Barrier(32)

    def approve(i: int) -> None:
        start.wait()
        answers.append(gate.decide(request_id, f"approver-{i}", "approve"))

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    released = [a for a in answers if a.released]
    refused = [a for a in answers if not a.ok]
    print(f"round {round_}: {len(released)} release, {len(refused)} refused as unknown")
    assert len(answers) == 32
    assert len(released) == 1
    assert all(a.http_status == 404 for a in refused) and len(refused) == 31
    assert queue_length(runtime) == 1
    assert [e[0] for e in events(runtime, call_id)] == ["pending", "approved"]


def test_a_call_whose_arguments_changed_after_issue_is_not_released(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime)
    with runtime.engine.begin() as conn:
        conn.execute(
            text("UPDATE calls SET args = :args WHERE id = :id"), {"args": '{"n":2}', "id": call_id}
        )
    answer = gate_for(runtime).decide(request_id, "approver", "approve")
    assert answer.http_status == 409
    assert answer.error == f"the call of {request_id} changed after the request was issued"
    assert call_status(runtime, call_id) == "pending"
    assert queue_length(runtime) == 0


def test_a_worker_refuses_arguments_changed_after_approval(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime)
    assert gate_for(runtime).decide(request_id, "approver", "approve").released
    with runtime.engine.begin() as conn:
        conn.execute(
            text("UPDATE calls SET args = :args WHERE id = :id"), {"args": '{"n":2}', "id": call_id}
        )
    executor = Executor(runtime, runtime.notifier(), actor="test-worker")
    assert executor.run(call_id, "high_echo") == "error"
    row = runtime.calls.read(call_id)
    assert (row.status, row.error_type) == ("failed", "TamperedArguments")


def test_an_approver_no_longer_sees_what_it_already_approved(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime, tool="two_man")
    approver = Principal("approver", APPROVER)
    assert request_id in [r["request_id"] for r in runtime.approvals_view.list_requests(approver)]
    assert gate_for(runtime).decide(request_id, "approver", "approve").ok
    assert request_id not in [
        r["request_id"] for r in runtime.approvals_view.list_requests(approver)
    ]
    other = Principal("approver2", APPROVER)
    assert request_id in [r["request_id"] for r in runtime.approvals_view.list_requests(other)]


def test_an_edit_of_a_tool_no_longer_registered_is_refused_as_the_worker_would(
    runtime: Runtime,
) -> None:
    refused = runtime.dispatcher.checks.check_edit("agent", "retired_tool", {"n": 1})
    assert refused == EditRefused(409, "tool retired_tool is no longer registered")
