"""The executor in-process (SPEC §4, §6, §7): claim, fence, reaper, reconciler, outcomes.

Real databases (SQLite and PostgreSQL) and real Redis, no Celery: ``Executor`` is the
plain class the Celery task calls. Time comes from a ``FakeClock``, so leases, publish
ages and audit timestamps are asserted exactly.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import exc, text

from router.audit import log as audit
from router.audit.log import AuditEntry
from router.clock import FakeClock
from router.constants import CALL_DONE_CHANNEL, POISON_CAP
from router.context import CallContext
from router.db.rows import CallRow
from router.errors import StoreUnavailable
from router.messaging.completions import parse_completion
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus
from router.trust.keyring import KeyRing
from workers.execution import RENEW_AFTER_MS, Executor, Finished
from workers.handlers import Outcome, invoke
from workers.pace import pace

from ..support.audit import call_audit_rows
from ..support.calls import queue_call
from ..support.waiting import wait_until_a_transaction_waits

APPEND_ONLY = "audit log is append-only"
WORKER_LOST = "worker lost during the run; outcome unknown"


def call_row(runtime: Runtime, call_id: str) -> CallRow:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row


def events(runtime: Runtime, call_id: str) -> list[str]:
    return [row["event"] for row in call_audit_rows(runtime, call_id)]


def ledger_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def claim_and_vanish(runtime: Runtime, executor: Executor, call_id: str, tool: str) -> CallRow:
    """Claim ``call_id`` as a worker would, then never finish: the worker died mid-run."""
    with runtime.store.transaction() as conn:
        row = runtime.store.claim(
            conn, call_id, now=runtime.clock(), lease_ms=executor.lease_ms(tool)
        )
    assert row is not None
    return row


def verify(runtime: Runtime) -> tuple[int, int | None, str | None]:
    """(rows checked, first bad seq, its reason)."""
    report = runtime.verify_audit()
    if report.ok:
        return report.checked, None, None
    return report.checked, report.problems[0].seq, report.problems[0].reason


# -- the claim ---------------------------------------------------------------------------


def test_duplicated_message_runs_the_handler_once(
    runtime: Runtime, executor: Executor, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger", {"path": str(path)})

    assert executor.run(call_id, "ledger") == "ok"
    assert executor.run(call_id, "ledger") == "dropped"

    assert len(ledger_lines(path)) == 1
    row = call_row(runtime, call_id)
    assert (row.status, row.attempt) == (CallStatus.SUCCEEDED, 1)
    assert events(runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.OK]


def test_two_workers_racing_for_one_call_run_it_once(
    runtime: Runtime, executor: Executor, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger", {"path": str(path), "sleep": 0.3})
    start = threading.Barrier(2)
    answers: list[str] = []

    def worker() -> None:
        start.wait(timeout=10)
        answers.append(executor.run(call_id, "ledger"))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(answers) == ["dropped", "ok"]
    assert len(ledger_lines(path)) == 1
    assert call_row(runtime, call_id).attempt == 1


def test_message_for_a_cancelled_call_is_dropped(
    runtime: Runtime, executor: Executor, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger", {"path": str(path)})
    with runtime.store.transaction() as conn:
        assert runtime.store.cancel(conn, call_id, now=runtime.clock())

    assert executor.run(call_id, "ledger") == "dropped"
    assert ledger_lines(path) == []
    assert call_row(runtime, call_id).status == CallStatus.CANCELLED


def test_handler_context_carries_the_call_id_as_idempotency_key(
    runtime: Runtime, executor: Executor
) -> None:
    call_id = queue_call(runtime, "context", {})
    assert executor.run(call_id, "context") == "ok"
    assert call_row(runtime, call_id).result().value == {
        "call_id": call_id,
        "idempotency_key": call_id,
        "attempt": 1,
        "requested_by": "agent",
        "tool": "context",
    }


# -- the fence ---------------------------------------------------------------------------


def test_late_finish_of_a_reaped_attempt_is_fenced(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    call_id = queue_call(runtime, "ledger_idempotent", {"path": "unused"})
    first = claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")
    clock.advance(executor.lease_ms("ledger_idempotent") + 1)
    assert executor.reap() == {"requeued": 1}
    second = claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")
    assert (first.attempt, second.attempt) == (1, 2)
    before = call_row(runtime, call_id)

    assert executor.finish(first, Outcome.of_value("late", max_nesting=64)) == "fenced"

    assert call_row(runtime, call_id) == before
    assert AuditEvent.OK not in events(runtime, call_id)

    assert executor.finish(second, Outcome.of_value("second", max_nesting=64)) == "ok"
    assert executor.finish(first, Outcome.of_value("later still", max_nesting=64)) == "fenced"
    row = call_row(runtime, call_id)
    assert (row.status, row.value, row.attempt) == (CallStatus.SUCCEEDED, '"second"', 2)
    assert events(runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.RETRY, AuditEvent.OK]


def test_late_finish_of_an_interrupted_run_does_not_overwrite_it(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    call_id = queue_call(runtime, "ledger", {"path": "unused"})
    lost = claim_and_vanish(runtime, executor, call_id, "ledger")
    clock.advance(executor.lease_ms("ledger") + 1)
    assert executor.reap() == {"interrupted": 1}

    assert (
        executor.finish(lost, Outcome.of_value("it did run after all", max_nesting=64)) == "fenced"
    )

    row = call_row(runtime, call_id)
    assert (row.status, row.value, row.error) == (CallStatus.INTERRUPTED, None, WORKER_LOST)


def test_a_hard_timeout_recorded_for_a_run_leaves_a_later_claim_of_its_call_alone(
    runtime: Runtime, executor: Executor, clock: FakeClock, tmp_path: Path
) -> None:
    """The watchdog's action at a lone run's hard limit (``record_timeout``) is fenced by
    that run's own claim: if the call was reaped and claimed again meanwhile, the second
    run is left to finish."""
    path, release = tmp_path / "ledger.txt", tmp_path / "release"
    args = {"path": str(path), "until": str(release)}
    call_id = queue_call(runtime, "ledger_idempotent", args)
    answers: list[str] = []
    first = threading.Thread(
        target=lambda: answers.append(executor.calls.run(call_id, "ledger_idempotent"))
    )
    first.start()
    try:
        deadline = time.monotonic() + 60
        while not ledger_lines(path) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the first run's handler has started
        assert len(ledger_lines(path)) == 1
        clock.advance(executor.lease_ms("ledger_idempotent") + 1)
        assert executor.reap() == {"requeued": 1}
        second = claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")

        executor.calls.record_timeout(call_id)  # the first run's hard limit strikes late

        row = call_row(runtime, call_id)
        assert (row.status, row.attempt, row.fence) == (CallStatus.RUNNING, 2, second.fence)
    finally:
        Path(f"{release}.1").touch()
        first.join(timeout=60)
    assert answers == ["fenced"]
    assert executor.finish(second, Outcome.of_value("second", max_nesting=64)) == "ok"
    assert events(runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.RETRY, AuditEvent.OK]


def test_a_hard_timeout_recorded_while_the_runs_claim_holds_fails_the_call(
    runtime: Runtime, executor: Executor, tmp_path: Path
) -> None:
    path, release = tmp_path / "ledger.txt", tmp_path / "release"
    call_id = queue_call(runtime, "ledger", {"path": str(path), "until": str(release)})
    answers: list[str] = []
    run = threading.Thread(target=lambda: answers.append(executor.calls.run(call_id, "ledger")))
    run.start()
    try:
        deadline = time.monotonic() + 60
        while not ledger_lines(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ledger_lines(path)) == 1

        executor.calls.record_timeout(call_id)

        row = call_row(runtime, call_id)
        assert (row.status, row.error) == (CallStatus.FAILED, "timeout after 5 s")
    finally:
        Path(f"{release}.1").touch()
        run.join(timeout=60)
    assert answers == ["fenced"]
    assert call_row(runtime, call_id).error == "timeout after 5 s"


# -- the reaper --------------------------------------------------------------------------


def test_reaper_leaves_a_run_alone_until_its_lease_runs_out(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    call_id = queue_call(runtime, "ledger_idempotent", {"path": "unused"})
    row = claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")
    assert row.lease_until == clock() + executor.lease_ms("ledger_idempotent")

    clock.advance(executor.lease_ms("ledger_idempotent"))
    assert executor.reap() == {}
    assert call_row(runtime, call_id).status == CallStatus.RUNNING

    clock.advance(1)
    assert executor.reap() == {"requeued": 1}


def test_reaper_requeues_a_lost_run_of_an_idempotent_tool_and_it_runs_again(
    runtime: Runtime, executor: Executor, clock: FakeClock, broker: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger_idempotent", {"path": str(path)})
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 1
    claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")
    clock.advance(executor.lease_ms("ledger_idempotent") + 1)
    reaped_at = clock()

    assert executor.reap() == {"requeued": 1}

    row = call_row(runtime, call_id)
    assert (row.status, row.lease_until, row.published_at) == (
        CallStatus.QUEUED,
        None,
        reaped_at,
    )
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 2
    retry = call_audit_rows(runtime, call_id)[-1]
    assert (retry["event"], retry["at"], retry["actor"]) == (
        AuditEvent.RETRY,
        reaped_at,
        "test-worker",
    )
    assert retry["detail"] == {"attempt": 1, "reason": "worker lost"}

    assert executor.run(call_id, "ledger_idempotent") == "ok"
    row = call_row(runtime, call_id)
    assert (row.status, row.attempt) == (CallStatus.SUCCEEDED, 2)
    assert [line.split()[:2] for line in ledger_lines(path)] == [[call_id, "2"]]
    assert executor.reap() == {}


def test_reaper_interrupts_a_lost_run_of_a_non_idempotent_tool_and_never_reruns_it(
    runtime: Runtime, executor: Executor, clock: FakeClock, broker: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger", {"path": str(path)})
    claim_and_vanish(runtime, executor, call_id, "ledger")
    clock.advance(executor.lease_ms("ledger") + 1)
    reaped_at = clock()

    assert executor.reap() == {"interrupted": 1}

    row = call_row(runtime, call_id)
    assert (row.status, row.error, row.error_type, row.finished_at) == (
        CallStatus.INTERRUPTED,
        WORKER_LOST,
        "WorkerLost",
        reaped_at,
    )
    assert row.result().to_dict() == {
        "ok": False,
        "call_id": call_id,
        "tool": "ledger",
        "status": "interrupted",
        "error": WORKER_LOST,
        "error_type": "WorkerLost",
    }
    last = call_audit_rows(runtime, call_id)[-1]
    assert (last["event"], last["at"]) == (AuditEvent.INTERRUPTED, reaped_at)
    assert events(runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.INTERRUPTED]

    # Never silently re-run: not by the reaper, the reconciler, nor a stray message.
    clock.advance(3_600_000)
    assert executor.reap() == {}
    assert executor.reconcile() == 0
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 1
    assert executor.run(call_id, "ledger") == "dropped"
    assert ledger_lines(path) == []


def test_idempotent_call_lost_three_times_is_failed_as_poison(
    runtime: Runtime, executor: Executor, clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger_idempotent", {"path": str(path)})
    answers = []
    for _ in range(POISON_CAP):
        claim_and_vanish(runtime, executor, call_id, "ledger_idempotent")
        clock.advance(executor.lease_ms("ledger_idempotent") + 1)
        answers.append(executor.reap())

    assert answers == [{"requeued": 1}, {"requeued": 1}, {"poisoned": 1}]
    row = call_row(runtime, call_id)
    assert (row.status, row.attempt, row.error, row.error_type) == (
        CallStatus.FAILED,
        3,
        "poison call: its run was lost 3 times",
        "PoisonCall",
    )
    assert events(runtime, call_id) == [
        AuditEvent.QUEUED,
        AuditEvent.RETRY,
        AuditEvent.RETRY,
        AuditEvent.ERROR,
    ]
    assert executor.run(call_id, "ledger_idempotent") == "dropped"
    assert ledger_lines(path) == []


# -- the reconciler ----------------------------------------------------------------------


def test_reconciler_republishes_a_queued_call_whose_publish_is_old(
    runtime: Runtime, executor: Executor, clock: FakeClock, broker: redis.Redis
) -> None:
    requeue_after_ms = int(runtime.settings.requeue_after_s * 1000)
    old = queue_call(runtime, "echo", {"n": 1})
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 1

    clock.advance(requeue_after_ms)
    fresh = queue_call(runtime, "echo", {"n": 2})
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 2
    assert executor.reconcile() == 0  # exactly requeue_after_s old is not yet stale

    clock.advance(1)
    assert executor.reconcile() == 1
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 3
    assert call_row(runtime, old).published_at == clock()
    assert call_row(runtime, fresh).published_at == clock() - 1

    assert executor.reconcile() == 0
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 3


def test_reconciler_leaves_running_and_finished_calls_alone(
    runtime: Runtime, executor: Executor, clock: FakeClock, broker: redis.Redis
) -> None:
    done = queue_call(runtime, "echo", {"n": 1})
    assert executor.run(done, "echo") == "ok"
    running = queue_call(runtime, "sleep", {"seconds": 0})
    claim_and_vanish(runtime, executor, running, "sleep")
    published = broker.llen(runtime.namespace.prefix + "tools.low") + broker.llen(
        runtime.namespace.prefix + "tools.medium"
    )

    clock.advance(int(runtime.settings.requeue_after_s * 1000) + 1)

    assert executor.reconcile() == 0
    assert (
        broker.llen(runtime.namespace.prefix + "tools.low")
        + broker.llen(runtime.namespace.prefix + "tools.medium")
        == published
    )


def test_reconciled_message_goes_to_the_queue_of_the_tools_risk(
    runtime: Runtime, executor: Executor, clock: FakeClock, broker: redis.Redis
) -> None:
    queue_call(runtime, "context", {})  # risk: medium
    assert broker.llen(runtime.namespace.prefix + "tools.medium") == 1
    clock.advance(int(runtime.settings.requeue_after_s * 1000) + 1)

    assert executor.reconcile() == 1
    assert broker.llen(runtime.namespace.prefix + "tools.medium") == 2
    assert broker.llen(runtime.namespace.prefix + "tools.low") == 0


# -- exact timestamps --------------------------------------------------------------------


def test_audit_rows_and_call_carry_the_fake_clocks_exact_times(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    t0 = clock()
    call_id = queue_call(runtime, "echo", {"x": 1})
    clock.advance(250)

    assert executor.run(call_id, "echo") == "ok"

    rows = call_audit_rows(runtime, call_id)
    assert [(row["event"], row["at"], row["actor"]) for row in rows] == [
        (AuditEvent.QUEUED, t0, "agent"),
        (AuditEvent.OK, t0 + 250, "test-worker"),
    ]
    row = call_row(runtime, call_id)
    assert (row.created_at, row.published_at) == (t0, t0)
    assert (row.started_at, row.finished_at, row.updated_at) == (t0 + 250, t0 + 250, t0 + 250)
    assert row.lease_until is None


def test_lease_start_and_finish_times_of_a_run_are_exact(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    t0 = clock()
    call_id = queue_call(runtime, "echo", {})
    clock.advance(100)
    row = claim_and_vanish(runtime, executor, call_id, "echo")
    assert (row.started_at, row.lease_until) == (t0 + 100, t0 + 100 + executor.lease_ms("echo"))
    # At least the tool's timeout (echo: the default 30 s) plus the grace (SPEC §6).
    assert executor.lease_ms("echo") >= int((30 + runtime.settings.lease_grace_s) * 1000)
    clock.advance(50)

    assert executor.finish(row, Outcome.of_value(None, max_nesting=64)) == "ok"

    row = call_row(runtime, call_id)
    assert (row.created_at, row.started_at, row.finished_at) == (t0, t0 + 100, t0 + 150)
    assert call_audit_rows(runtime, call_id)[-1]["at"] == t0 + 150


# -- outcomes as values ------------------------------------------------------------------

FALSY = [0, False, None, "", [], {}]


@pytest.mark.parametrize("value", FALSY, ids=repr)
def test_falsy_return_value_is_a_success(runtime: Runtime, executor: Executor, value: Any) -> None:
    call_id = queue_call(runtime, "value", {"value": value})

    assert executor.run(call_id, "value") == "ok"

    result = call_row(runtime, call_id).result()
    assert result.status == CallStatus.SUCCEEDED
    assert result.value == value
    assert type(result.value) is type(value)
    body = result.to_dict()
    assert body["ok"] is True
    assert "value" in body
    assert body["value"] == value
    assert "error" not in body


ERRORS = [
    ("value_error", {}, "insufficient funds", "ValueError"),
    ("value_error", {"message": "card declined"}, "card declined", "ValueError"),
    ("key_error", {}, "missing_key", "KeyError"),
    ("empty_error", {}, "RuntimeError", "RuntimeError"),
    ("system_exit", {}, "3", "SystemExit"),
    ("keyboard_interrupt", {}, "KeyboardInterrupt", "KeyboardInterrupt"),
    ("retryable", {}, "try later", "RetryableError"),
]


@pytest.mark.parametrize(("tool", "args", "error", "error_type"), ERRORS, ids=lambda v: str(v))
def test_exception_becomes_the_raisers_own_message(
    runtime: Runtime, executor: Executor, tool: str, args: Any, error: str, error_type: str
) -> None:
    call_id = queue_call(runtime, tool, args)

    assert executor.run(call_id, tool) == "error"

    row = call_row(runtime, call_id)
    assert (row.status, row.error, row.error_type, row.value) == (
        CallStatus.FAILED,
        error,
        error_type,
        None,
    )
    body = row.result().to_dict()
    assert body == {
        "ok": False,
        "call_id": call_id,
        "tool": tool,
        "status": "failed",
        "error": error,
        "error_type": error_type,
    }
    last = call_audit_rows(runtime, call_id)[-1]
    assert last["event"] == AuditEvent.ERROR
    assert isinstance(last["detail"].pop("ms"), int)  # how long the handler ran
    assert last["detail"] == {"attempt": 1, "error": error, "error_type": error_type}


@pytest.mark.parametrize(("tool", "error_type"), [("not_json", "TypeError"), ("nan", "ValueError")])
def test_result_that_is_not_json_fails_the_call(
    runtime: Runtime, executor: Executor, tool: str, error_type: str
) -> None:
    call_id = queue_call(runtime, tool, {})

    assert executor.run(call_id, tool) == "error"

    row = call_row(runtime, call_id)
    assert row.status == CallStatus.FAILED
    assert row.error is not None and row.error.startswith("result is not JSON: ")
    assert "Traceback" not in row.error
    assert row.error_type == error_type
    assert row.value is None


def test_unknown_tool_at_run_time_fails_the_call(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    # The tool was removed from the config between submission and run.
    call_id = queue_call(runtime, "echo", {})
    with runtime.store.transaction() as conn:
        conn.execute(text("UPDATE calls SET tool = 'gone' WHERE id = :id"), {"id": call_id})

    assert executor.run(call_id, "gone") == "error"  # its message names the tool it had

    row = call_row(runtime, call_id)
    assert (row.status, row.error, row.error_type) == (
        CallStatus.FAILED,
        "unknown tool: gone",
        "ToolNotFound",
    )


def ctx_for(tool: str) -> CallContext:
    return CallContext(
        call_id="call_test", idempotency_key="key", attempt=1, requested_by="agent", tool=tool
    )


@pytest.mark.parametrize(("tool", "args", "error", "error_type"), ERRORS, ids=lambda v: str(v))
def test_invoke_turns_every_exception_into_an_outcome(
    runtime: Runtime, tool: str, args: Any, error: str, error_type: str
) -> None:
    handler_tool = runtime.registry.get(tool)
    assert handler_tool is not None

    outcome = invoke(handler_tool, args, ctx_for(tool))

    assert (outcome.ok, outcome.error, outcome.error_type, outcome.value_json) == (
        False,
        error,
        error_type,
        None,
    )
    assert outcome.retryable is (tool == "retryable")


@pytest.mark.parametrize("value", FALSY, ids=repr)
def test_invoke_returns_falsy_values_as_successes(runtime: Runtime, value: Any) -> None:
    tool = runtime.registry.get("value")
    assert tool is not None

    outcome = invoke(tool, {"value": value}, ctx_for("value"))

    assert outcome.ok is True
    assert outcome.error is None
    assert outcome.value_json is not None


def test_invoke_returns_a_non_json_result_as_an_error(runtime: Runtime) -> None:
    tool = runtime.registry.get("not_json")
    assert tool is not None

    outcome = invoke(tool, {}, ctx_for("not_json"))

    assert outcome.ok is False
    assert outcome.error == "result is not JSON: Object of type object is not JSON serializable"
    assert outcome.error_type == "TypeError"


# -- the audit chain ---------------------------------------------------------------------


def run_a_few_calls(runtime: Runtime, executor: Executor, clock: FakeClock) -> int:
    for tool, args in [("echo", {"a": 1}), ("value_error", {}), ("value", {"value": 0})]:
        call_id = queue_call(runtime, tool, args)
        clock.advance(7)
        executor.run(call_id, tool)
    assert runtime.dispatcher.submit("agent", "nope", {}).status == "rejected"
    assert runtime.dispatcher.submit("agent", "strict", {"to": 1}).status == "rejected"
    with runtime.store.reading() as conn:
        return len(audit.query(conn, limit=1000))


def test_audit_chain_verifies_after_a_sequence_of_calls(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    rows = run_a_few_calls(runtime, executor, clock)

    assert rows == 8
    assert verify(runtime) == (rows, None, None)


def test_database_refuses_update_and_delete_of_audit_rows(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    run_a_few_calls(runtime, executor, clock)

    with pytest.raises(exc.DBAPIError, match=APPEND_ONLY), runtime.engine.begin() as conn:
        conn.execute(text("UPDATE audit_log SET actor = 'mallory' WHERE seq = 2"))
    with pytest.raises(exc.DBAPIError, match=APPEND_ONLY), runtime.engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log WHERE seq = 2"))
    if runtime.engine.dialect.name == "postgresql":
        with pytest.raises(exc.DBAPIError, match=APPEND_ONLY), runtime.engine.begin() as conn:
            conn.execute(text("TRUNCATE audit_log"))

    with runtime.store.reading() as conn:
        rows = audit.query(conn, limit=1000)
    assert len(rows) == 8
    assert rows[1]["actor"] == "test-worker"
    assert verify(runtime) == (8, None, None)


def bypass_append_only(conn: Any) -> None:
    """What only someone with the database's owner rights can do: switch the guard off."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("ALTER TABLE audit_log DISABLE TRIGGER USER"))
    else:
        conn.execute(text("DROP TRIGGER audit_log_no_update"))
        conn.execute(text("DROP TRIGGER audit_log_no_delete"))


def test_verify_names_the_row_whose_contents_were_rewritten(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    rows = run_a_few_calls(runtime, executor, clock)
    with runtime.engine.begin() as conn:
        bypass_append_only(conn)
        conn.execute(text("UPDATE audit_log SET actor = 'mallory' WHERE seq = 4"))

    assert verify(runtime) == (8, 4, "hash does not match the row (edited, or not written here)")
    assert rows == 8


def test_verify_names_the_row_after_one_rewritten_with_a_fresh_hash(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    run_a_few_calls(runtime, executor, clock)
    with runtime.store.reading() as conn:
        stored = conn.execute(text("SELECT * FROM audit_log WHERE seq = 3")).mappings().one()
    forged = {**stored, "actor": "mallory"}
    with runtime.engine.begin() as conn:
        bypass_append_only(conn)
        conn.execute(
            text("UPDATE audit_log SET actor = 'mallory', hash = :hash WHERE seq = 3"),
            {"hash": runtime.audit.row_hash(forged)},
        )

    # Re-hashed with the key (as only the key's holder could): the next row no longer links.
    assert verify(runtime) == (8, 4, "does not link to the row before it (prev_hash differs)")


def test_verify_names_the_gap_left_by_a_deleted_row(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    run_a_few_calls(runtime, executor, clock)
    with runtime.engine.begin() as conn:
        bypass_append_only(conn)
        conn.execute(text("DELETE FROM audit_log WHERE seq = 5"))

    assert verify(runtime) == (7, 6, "seq 5 missing before it (deleted, or this row inserted)")


# -- shared messages: each call claimed with the outcome of the one before ---------------


def test_a_shared_message_claims_each_call_in_the_transaction_of_the_one_before(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    call_ids = [queue_call(runtime, "echo", {"n": n}) for n in range(3)]
    transactions = Transactions(runtime, monkeypatch)

    assert executor.run_many(call_ids, "echo") == ["ok", "ok", "ok"]

    # One claim, then three outcomes, each with the next call's claim: not six.
    assert transactions.count == 4
    for n, call_id in enumerate(call_ids):
        row = call_row(runtime, call_id)
        assert (row.status, row.attempt, row.arguments) == ("succeeded", 1, {"n": n})
        assert row.value is not None and json.loads(row.value) == {"n": n}
        assert events(runtime, call_id) == ["queued", "ok"]


def finish_claiming(executor: Executor, row: CallRow, next_call: str) -> list[str]:
    """The transaction that ends a call of a shared message: its outcome (a success), and
    the next call's claim. Returns the calls fenced off."""
    outcome = Outcome(ok=True, value_json="1")
    done = Finished(row, outcome, CallStatus.SUCCEEDED, AuditEvent.OK, at=row.created_at)
    return executor.ledger.commit([done], claim=[next_call], tool_hint=row.tool)


def test_a_call_claimed_ahead_goes_back_to_the_queue_if_its_process_must_end(
    runtime: Runtime, executor: Executor, broker: redis.Redis
) -> None:
    first, second = queue_call(runtime, "echo", {"n": 1}), queue_call(runtime, "echo", {"n": 2})
    broker.delete(runtime.namespace.prefix + "tools.low")
    with runtime.store.transaction() as conn:
        row = runtime.store.claim(conn, first, now=runtime.clock(), lease_ms=60_000)
    assert row is not None
    assert finish_claiming(executor, row, second) == []
    assert call_row(runtime, second).status == CallStatus.RUNNING

    # The first call's hard limit strikes as it ends (the watchdog, workers.call_limits).
    executor.shared.at_hard_timeout(first, [second])

    assert call_row(runtime, first).status == CallStatus.SUCCEEDED  # its outcome stands
    assert call_row(runtime, second).status == CallStatus.QUEUED
    assert (
        broker.llen(runtime.namespace.prefix + "tools.low") == 1
    )  # published again, for another process
    assert executor.run(second, "echo") == "ok"
    assert (call_row(runtime, second).status, call_row(runtime, second).attempt) == (
        CallStatus.SUCCEEDED,
        2,
    )
    assert events(runtime, second) == ["queued", "ok"]


def test_a_call_claimed_ahead_that_is_no_longer_queued_is_dropped(
    runtime: Runtime, executor: Executor
) -> None:
    first, second = queue_call(runtime, "echo", {"n": 1}), queue_call(runtime, "echo", {"n": 2})
    assert executor.run(second, "echo") == "ok"  # a duplicate message ran it already
    with runtime.store.transaction() as conn:
        row = runtime.store.claim(conn, first, now=runtime.clock(), lease_ms=60_000)
    assert row is not None
    assert finish_claiming(executor, row, second) == []

    assert executor.run(second, "echo") == "dropped"
    assert call_row(runtime, second).attempt == 1
    assert events(runtime, second) == ["queued", "ok"]


def test_a_cancel_of_the_call_claimed_ahead_racing_the_outcome_before_it_does_not_deadlock(
    runtime: Runtime, executor: Executor
) -> None:
    """A cancel takes the call's row, then the audit chain's lock; the outcome of the call
    before it in a shared message claims it in the same transaction. The outcome must
    take the row before the chain too: holding the chain while it waited for the row,
    it would deadlock with the cancel (PostgreSQL then aborts one of them after a
    second: the outcome lost, or the cancel refused)."""
    first, second = queue_call(runtime, "echo", {"n": 1}), queue_call(runtime, "echo", {"n": 2})
    with runtime.store.transaction() as conn:
        row = runtime.store.claim(conn, first, now=runtime.clock(), lease_ms=60_000)
    assert row is not None
    outcome: list[object] = []

    def finish_first() -> None:
        try:
            outcome.append(finish_claiming(executor, row, second))
        except BaseException as error:  # reported to the test below
            outcome.append(error)

    finishing = threading.Thread(target=finish_first)
    with runtime.store.transaction() as conn:  # the cancel, as ``router.dispatch.calls`` makes it
        assert runtime.store.cancel(conn, second, now=runtime.clock())
        finishing.start()
        wait_until_a_transaction_waits(runtime, "transactionid")  # the claim, for the row
        runtime.audit.append(
            conn,
            [AuditEntry(event=AuditEvent.CANCELLED, actor="agent", tool="echo", call_id=second)],
            at=runtime.clock(),
        )
    finishing.join(timeout=30)

    assert outcome == [[]]  # nothing fenced
    assert call_row(runtime, first).status == CallStatus.SUCCEEDED
    assert call_row(runtime, second).status == CallStatus.CANCELLED
    assert executor.run(second, "echo") == "dropped"  # its claim found it cancelled
    assert events(runtime, second) == ["queued", "cancelled"]
    assert verify(runtime)[1:] == (None, None)


def test_a_shared_message_cut_short_puts_its_call_claimed_ahead_back(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``BaseException`` (a warm shutdown's, an interrupt) that ends the loop between a
    call's outcome and the next call's start: that next call, claimed with the outcome,
    goes back to ``queued``; the calls after it were never claimed."""
    first, second, third = (queue_call(runtime, "echo", {"n": n}) for n in range(3))
    announce = executor.notifier.calls_done

    def interrupted(done: Any) -> None:
        announce(done)
        raise KeyboardInterrupt  # after the commit that recorded ``first`` and claimed ``second``

    monkeypatch.setattr(executor.notifier, "calls_done", interrupted)
    with pytest.raises(KeyboardInterrupt):
        executor.run_many([first, second, third], "echo")

    assert call_row(runtime, first).status == CallStatus.SUCCEEDED
    assert (call_row(runtime, second).status, call_row(runtime, second).attempt) == (
        CallStatus.QUEUED,
        1,
    )
    assert (call_row(runtime, third).status, call_row(runtime, third).attempt) == (
        CallStatus.QUEUED,
        0,
    )
    monkeypatch.setattr(executor.notifier, "calls_done", announce)
    assert executor.run(second, "echo") == "ok"  # runs later, as its attempt 2
    assert (call_row(runtime, second).status, call_row(runtime, second).attempt) == (
        CallStatus.SUCCEEDED,
        2,
    )
    assert events(runtime, second) == ["queued", "ok"]


# -- shared messages: runs of calls claimed, and their outcomes held, together ------------


class Transactions:
    """Counts the store's write transactions."""

    def __init__(self, runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real_transaction = runtime.store.transaction

        def counted() -> Any:
            self.count += 1
            return real_transaction()

        monkeypatch.setattr(runtime.store, "transaction", counted)


def announced(subscription: Any, count: int, keyring: KeyRing) -> list[tuple[str, Any]]:
    """The first ``count`` completions published: (call id, parsed result)."""
    heard = []
    deadline = time.monotonic() + 10
    while len(heard) < count and time.monotonic() < deadline:
        message = subscription.get_message(timeout=1.0)
        if message is not None and message["type"] == "message":
            parsed = parse_completion(message["data"], keyring)
            assert parsed is not None
            heard.append(parsed)
    return heard


def test_a_run_of_calls_of_an_idempotent_tool_is_claimed_and_recorded_in_one_transaction_each(
    runtime: Runtime, executor: Executor, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once this process knows ``echo`` runs in well under the outcome hold, a message's
    calls are claimed in one transaction and their outcomes recorded in one more, each
    with its own row update, audit row and notification."""
    call_ids = [queue_call(runtime, "echo", {"n": n}) for n in range(5)]
    pace.observe("echo", 0.01)  # calls of a hundredth of a millisecond: all fit the hold
    subscription = broker.pubsub(ignore_subscribe_messages=True)
    subscription.subscribe(runtime.namespace.key(CALL_DONE_CHANNEL))
    transactions = Transactions(runtime, monkeypatch)

    assert executor.run_many(call_ids, "echo") == ["ok"] * 5

    assert transactions.count == 2  # the run's claim, then its outcomes: not six
    for n, call_id in enumerate(call_ids):
        row = call_row(runtime, call_id)
        assert (row.status, row.attempt, row.arguments) == ("succeeded", 1, {"n": n})
        assert row.value is not None and json.loads(row.value) == {"n": n}
        assert events(runtime, call_id) == ["queued", "ok"]
    heard = announced(subscription, len(call_ids), runtime.keyring)
    subscription.close()
    assert [call_id for call_id, _ in heard] == call_ids
    assert [result.value for _, result in heard] == [{"n": n} for n in range(5)]
    assert verify(runtime)[1:] == (None, None)


def test_calls_of_a_tool_that_is_not_idempotent_are_recorded_one_by_one(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outcome held is lost if the process dies, and a lost run of a tool that is not
    idempotent is never run again: such outcomes are committed as they come."""
    call_ids = [queue_call(runtime, "value", {"value": n}) for n in range(3)]
    pace.observe("value", 0.01)
    transactions = Transactions(runtime, monkeypatch)

    assert executor.run_many(call_ids, "value") == ["ok"] * 3

    assert transactions.count == 4  # a claim, then each outcome with the next call's claim
    assert [call_row(runtime, call_id).status for call_id in call_ids] == ["succeeded"] * 3


def test_held_outcomes_are_committed_once_the_oldest_was_held_for_the_hold(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pace said the calls were quick, but each takes longer than the hold: each
    outcome is committed after its own call, not after all three."""
    call_ids = [queue_call(runtime, "sleep", {"seconds": 0.02}) for _ in range(3)]
    pace.observe("sleep", 0.01)
    assert runtime.settings.outcome_hold_ms < 20
    transactions = Transactions(runtime, monkeypatch)
    seen_done: list[list[str]] = []
    real_run = executor.calls.run

    def run_noting_what_is_done(call_id: str, tool_hint: str | None = None) -> str:
        seen_done.append([call_row(runtime, c).status for c in call_ids])
        return real_run(call_id, tool_hint)

    monkeypatch.setattr(executor.calls, "run", run_noting_what_is_done)

    assert executor.run_many(call_ids, "sleep") == ["ok"] * 3

    assert transactions.count == 4  # the run's claim, then each outcome on its own
    assert seen_done == [
        ["running", "running", "running"],
        ["succeeded", "running", "running"],
        ["succeeded", "succeeded", "running"],
    ]


def test_a_call_claimed_ahead_behind_a_slow_one_gets_a_fresh_lease_before_its_turn(
    runtime: Runtime, executor: Executor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lease was taken when its run was claimed; had the calls before it taken most
    of it, the reaper would take the call back while it runs."""
    call_ids = [queue_call(runtime, "echo", {"n": n}) for n in range(3)]
    pace.observe("echo", 0.01)
    lease_ms = executor.lease_ms("echo")
    leases_at_start: list[int | None] = []
    real_run = executor.calls.run

    def slow_run(call_id: str, tool_hint: str | None = None) -> str:
        leases_at_start.append(call_row(runtime, call_id).lease_until)
        result = real_run(call_id, tool_hint)
        clock.advance(RENEW_AFTER_MS + 500)  # this call took longer than its pace
        return result

    monkeypatch.setattr(executor.calls, "run", slow_run)
    claimed_at = clock()

    assert executor.run_many(call_ids, "echo") == ["ok"] * 3

    step = RENEW_AFTER_MS + 500
    assert leases_at_start == [
        claimed_at + lease_ms,
        claimed_at + step + lease_ms,  # renewed with the first call's outcome
        claimed_at + 2 * step + lease_ms,
    ]
    assert [call_row(runtime, c).status for c in call_ids] == ["succeeded"] * 3
    assert [events(runtime, c) for c in call_ids] == [["queued", "ok"]] * 3


def test_held_outcomes_stand_when_the_message_is_cut_short(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm shutdown's exception between two calls: the outcomes held are committed,
    and the calls claimed and not started go back to ``queued``."""
    call_ids = [queue_call(runtime, "echo", {"n": n}) for n in range(4)]
    pace.observe("echo", 0.01)
    real_run = executor.calls.run

    def interrupted_at_the_third(call_id: str, tool_hint: str | None = None) -> str:
        if call_id == call_ids[2]:
            raise KeyboardInterrupt
        return real_run(call_id, tool_hint)

    monkeypatch.setattr(executor.calls, "run", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        executor.run_many(call_ids, "echo")

    rows = [call_row(runtime, call_id) for call_id in call_ids]
    assert [(row.status, row.attempt) for row in rows] == [
        ("succeeded", 1),
        ("succeeded", 1),
        ("queued", 1),  # claimed with the run, given back (its attempt fenced)
        ("queued", 1),
    ]
    assert [events(runtime, c) for c in call_ids[:2]] == [["queued", "ok"]] * 2
    assert verify(runtime)[1:] == (None, None)


def test_held_outcomes_the_database_never_took_leave_their_calls_to_the_reaper(
    runtime: Runtime, executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    call_ids = [queue_call(runtime, "echo", {"n": n}) for n in range(3)]
    pace.observe("echo", 0.01)
    real_transaction = runtime.store.transaction
    transactions = 0

    def down_after_the_claim() -> Any:
        nonlocal transactions
        transactions += 1
        if transactions > 1:
            raise StoreUnavailable("the database is down")
        return real_transaction()

    monkeypatch.setattr(runtime.store, "transaction", down_after_the_claim)

    assert executor.run_many(call_ids, "echo") == ["failed"] * 3

    monkeypatch.setattr(runtime.store, "transaction", real_transaction)
    assert [call_row(runtime, c).status for c in call_ids] == ["running"] * 3
    assert [events(runtime, c) for c in call_ids] == [["queued"]] * 3
