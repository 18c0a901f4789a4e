"""Several calls of one tool in one worker message (``message_builder.pack``), run by a real
worker: each call is claimed, limited, recorded and recovered on its own, as if it had a
message to itself (SPEC §6)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from router.audit import log as audit
from router.clock import wall_clock_ms
from router.dispatch.submission import Submission
from router.messaging.message_builder import pack
from router.messaging.run_message import Precedence, RunMessage
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus
from workers.execution import Executor

from ..support.faults import PrivateStack, ledger_runs, private_stack_in, start_worker, status
from ..support.launcher import stop_group
from ..support.waiting import wait_for, wait_until_finished

# -- which calls share a message (pure) ---------------------------------------------------


def run_message(n: int, tool: str = "echo", per_message: int = 8, **kw: Any) -> RunMessage:
    return RunMessage(
        call_id=f"call_{tool}_{n}",
        tool=tool,
        queue="tools.low",
        timeout_s=30,
        calls_per_message=per_message,
        **kw,
    )


def sizes(packed: list[tuple[RunMessage, list[str]]]) -> list[int]:
    return [len(ids) for _, ids in packed]


def test_calls_of_one_tool_share_messages_of_even_size_in_order() -> None:
    calls = [run_message(n) for n in range(20)]
    packed = pack(calls, spread=1)
    assert sizes(packed) == [7, 7, 6]
    assert [i for _, ids in packed for i in ids] == [m.call_id for m in calls]
    # Each message is built from its first call: tool, queue and time limit.
    assert [first.call_id for first, _ in packed] == ["call_echo_0", "call_echo_7", "call_echo_14"]


def test_a_group_is_spread_over_at_least_as_many_messages_as_pool_processes() -> None:
    assert sizes(pack([run_message(n) for n in range(3)], spread=2)) == [2, 1]
    assert sizes(pack([run_message(n) for n in range(10)], spread=4)) == [3, 3, 2, 2]
    assert sizes(pack([run_message(n) for n in range(40)], spread=2)) == [8] * 5
    assert sizes(pack([run_message(0)], spread=2)) == [1]


def test_other_tools_countdowns_and_one_per_message_tools_go_apart() -> None:
    calls = [
        run_message(0),
        run_message(0, tool="other"),
        run_message(1),
        run_message(1, tool="http", per_message=1),
        run_message(2, tool="http", per_message=1),
        run_message(2, countdown=5.0),
        run_message(1, tool="other"),
    ]
    packed = pack(calls, spread=1)
    assert sorted(ids for _, ids in packed) == sorted(
        [
            ["call_echo_0", "call_echo_1"],
            ["call_other_0", "call_other_1"],
            ["call_http_1"],
            ["call_http_2"],
            ["call_echo_2"],
        ]
    )
    held = [first for first, ids in packed if ids == ["call_echo_2"]]
    assert held[0].countdown == 5.0


def test_a_batchs_calls_share_no_message_with_others() -> None:
    calls = [run_message(n, precedence=Precedence.of(None if n % 2 else "b1")) for n in range(6)]
    packed = pack(calls, spread=1)
    assert sorted((first.precedence, ids) for first, ids in packed) == [
        (Precedence.INTERACTIVE, ["call_echo_1", "call_echo_3", "call_echo_5"]),
        (Precedence.BATCH, ["call_echo_0", "call_echo_2", "call_echo_4"]),
    ]


# -- real worker -------------------------------------------------------------------------


@pytest.fixture
def one_spread(tmp_path: Path) -> Iterator[PrivateStack]:
    """Calls published together go out in as few messages as their tool allows."""
    with private_stack_in(tmp_path, worker_concurrency=1) as private:
        yield private


def submit_together(runtime: Runtime, tool: str, args: list[dict[str, Any]]) -> list[str]:
    results = runtime.dispatcher.submit_many([Submission("agent", tool, a) for a in args])
    call_ids = [r.call_id for r in results]
    assert all(isinstance(call_id, str) for call_id in call_ids), results
    return [str(call_id) for call_id in call_ids]


def queued_messages(runtime: Runtime, client: redis.Redis) -> list[dict[str, Any]]:
    queue = runtime.namespace.prefix + "tools.low"
    return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]


def test_calls_submitted_together_share_messages_and_each_runs_once(
    one_spread: PrivateStack,
) -> None:
    runtime, ledger = one_spread.runtime, one_spread.dir / "ledger.txt"
    client = redis.Redis.from_url(one_spread.redis.url)
    worker = None
    try:
        call_ids = submit_together(
            runtime, "ledger", [{"path": str(ledger), "n": n} for n in range(12)]
        )
        # No worker yet: the messages wait in Redis. Twelve calls, at most eight a message.
        messages = queued_messages(runtime, client)
        assert len(messages) == 2
        carried = []
        for message in messages:
            args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            assert kwargs == {"tool": "ledger"} and len(args) == 6
            # Flower shows the call ids, never the arguments.
            assert message["headers"]["argsrepr"] == repr(args)
            # Celery's hard limit only backs up the worker's own per-call limits.
            assert message["headers"]["timelimit"] == [6 * (5 + 10) + 10, None]
            carried += args
        assert sorted(carried) == sorted(call_ids)

        worker = start_worker(one_spread.env, one_spread.dir / "worker.log")
        rows = wait_until_finished(runtime, call_ids, timeout=60)
        assert {call_id: row.status for call_id, row in rows.items() if row} == {
            call_id: CallStatus.SUCCEEDED for call_id in call_ids
        }
        assert ledger_runs(ledger) == {call_id: 1 for call_id in call_ids}
        with runtime.store.reading() as conn:
            for call_id in call_ids:
                events = [row["event"] for row in audit.query(conn, call_id=call_id)]
                assert events == [AuditEvent.QUEUED, AuditEvent.OK]
    finally:
        if worker is not None:
            stop_group(worker)
        client.close()


def test_each_call_of_a_message_has_its_own_soft_time_limit(one_spread: PrivateStack) -> None:
    """``slow`` has a 1 s timeout: the call sleeping 5 s is stopped at 1 s, and the calls
    after it in the same message still run, in the same pool process."""
    runtime = one_spread.runtime
    client = redis.Redis.from_url(one_spread.redis.url)
    worker = None
    try:
        late, quick, quicker = submit_together(
            runtime, "slow", [{"seconds": 5}, {"seconds": 0.2}, {"seconds": 0}]
        )
        assert len(queued_messages(runtime, client)) == 1
        worker = start_worker(one_spread.env, one_spread.dir / "worker.log")
        pool = psutil.Process(worker.pid).children()
        rows = wait_until_finished(runtime, [late, quick, quicker], timeout=60)
        assert rows[late] is not None and rows[quick] is not None and rows[quicker] is not None
        assert (rows[late].status, rows[late].error, rows[late].error_type) == (
            CallStatus.FAILED,
            "timeout after 1 s",
            "TimeoutError",
        )
        assert rows[quick].status == rows[quicker].status == CallStatus.SUCCEEDED
        assert psutil.Process(worker.pid).children() == pool
    finally:
        if worker is not None:
            stop_group(worker)
        client.close()


def test_a_call_that_swallows_its_soft_limit_is_ended_and_the_rest_of_its_message_runs(
    one_spread: PrivateStack,
) -> None:
    """``stubborn`` ignores the soft limit: at the hard limit (1 s + 10 s) the call is
    recorded as timed out, the pool process ends, and the call after it in the message
    goes back to the queue and runs."""
    runtime = one_spread.runtime
    client = redis.Redis.from_url(one_spread.redis.url)
    worker = None
    try:
        stuck, after = submit_together(runtime, "stubborn", [{"seconds": 120}, {"seconds": 0}])
        assert len(queued_messages(runtime, client)) == 1
        worker = start_worker(one_spread.env, one_spread.dir / "worker.log")
        (pool_process,) = psutil.Process(worker.pid).children()
        rows = wait_until_finished(runtime, [stuck, after], timeout=60)
        assert rows[stuck] is not None and rows[after] is not None
        assert (rows[stuck].status, rows[stuck].error, rows[stuck].error_type) == (
            CallStatus.FAILED,
            "timeout after 1 s",
            "TimeoutError",
        )
        assert (rows[after].status, rows[after].value) == (CallStatus.SUCCEEDED, '"finished"')
        # The watchdog recorded the timeout (a kernel kill would leave the call running,
        # for the reaper) and ended the pool process; the worker lives on with a new one.
        assert not pool_process.is_running()
        assert worker.poll() is None
    finally:
        if worker is not None:
            stop_group(worker)
        client.close()


def test_a_pool_process_killed_mid_message_loses_none_of_it_and_runs_none_twice(
    one_spread: PrivateStack,
) -> None:
    """Three ``crash`` calls (not idempotent) in one message; each takes its pool process
    down mid-run, as a segfault would. Redis keeps no copy of the message: the calls not
    yet started are still queued, so the reconciler publishes them and each runs once;
    every call that was running is interrupted by the reaper, never run again."""
    runtime, ledger = one_spread.runtime, one_spread.dir / "crashes.txt"
    client = redis.Redis.from_url(one_spread.redis.url)
    worker = None
    ahead_ms = [60_000]
    later = Runtime(runtime.settings, clock=lambda: wall_clock_ms() + ahead_ms[0])
    notifier = later.notifier()
    # The recovery tasks as beat would run them a minute later (and another after that).
    recovery = Executor(later, notifier, actor="test-recovery")
    try:
        first, *unstarted = submit_together(runtime, "crash", [{"path": str(ledger)}] * 3)
        assert len(queued_messages(runtime, client)) == 1
        worker = start_worker(one_spread.env, one_spread.dir / "worker.log")
        wait_for(lambda: ledger_runs(ledger).get(first) == 1, 30, "the first call to run")
        wait_for(lambda: len(psutil.Process(worker.pid).children()) == 1, 30, "a new process")
        assert [status(runtime, call_id) for call_id in unstarted] == ["queued", "queued"]
        assert status(runtime, first) == "running"
        assert queued_messages(runtime, client) == []

        # Published again together, the two share a message again: the first of them takes
        # that process down too, and the last waits for the reconciler's next pass.
        second, third = unstarted
        assert recovery.reconcile() == 2
        wait_for(lambda: ledger_runs(ledger).get(second) == 1, 60, "the second to run")
        wait_for(lambda: status(runtime, second) == "running", 30, "the second to be claimed")
        assert status(runtime, third) == "queued"
        ahead_ms[0] = 120_000  # past the time the first pass published it again
        assert recovery.reconcile() == 1
        wait_for(lambda: ledger_runs(ledger).get(third) == 1, 60, "the third to run")
        wait_for(lambda: status(runtime, third) == "running", 30, "the third to be claimed")
        assert recovery.reap() == {"interrupted": 3}
        assert {status(runtime, c) for c in [first, *unstarted]} == {"interrupted"}
        assert recovery.reconcile() == 0
        assert ledger_runs(ledger) == {call_id: 1 for call_id in [first, *unstarted]}
    finally:
        notifier.client.close()
        later.close()
        if worker is not None:
            stop_group(worker)
        client.close()


def test_outcomes_held_when_their_pool_process_dies_are_recovered_and_their_calls_run_again(
    tmp_path: Path,
) -> None:
    """A run of three calls of an idempotent tool, claimed together, their outcomes held
    (a long hold, so nothing is committed before the run ends): the third call's handler
    takes the pool process down after the first two ran. Nothing of the run was recorded,
    so all three are still ``running``; the reaper re-queues them as lost runs of an
    idempotent tool, and they run again, once each, under the same idempotency keys."""
    with private_stack_in(tmp_path, worker_concurrency=1) as private:
        runtime, ledger = private.runtime, private.dir / "ledger.txt"
        env = {**private.env, "TOOLROUTER_OUTCOME_HOLD_MS": "1000"}
        later = Runtime(runtime.settings, clock=lambda: wall_clock_ms() + 60_000)
        notifier = later.notifier()
        recovery = Executor(later, notifier, actor="test-recovery")
        worker = start_worker(env, private.dir / "worker.log")
        try:
            # The pool process learns the tool's pace, so the next message is one run.
            warm = submit_together(runtime, "ledger_idempotent", [{"path": str(ledger)}] * 2)
            wait_until_finished(runtime, warm, timeout=60)
            (pool_process,) = psutil.Process(worker.pid).children()

            run = submit_together(
                runtime,
                "ledger_idempotent",
                [
                    {"path": str(ledger)},
                    {"path": str(ledger)},
                    {"path": str(ledger), "kill_on_attempt": 1},
                ],
            )
            wait_for(lambda: not pool_process.is_running(), 30, "the pool process to die")
            assert ledger_runs(ledger) == {**{c: 1 for c in warm}, **{c: 1 for c in run}}
            assert [status(runtime, call_id) for call_id in run] == ["running"] * 3
            with runtime.store.reading() as conn:
                assert [
                    [row["event"] for row in audit.query(conn, call_id=call_id)] for call_id in run
                ] == [[AuditEvent.QUEUED]] * 3

            assert recovery.reap() == {"requeued": 3}
            rows = wait_until_finished(runtime, run, timeout=60)
            assert [(row.status, row.attempt) for row in rows.values() if row] == [
                (CallStatus.SUCCEEDED, 2)
            ] * 3
            assert ledger_runs(ledger) == {**{c: 1 for c in warm}, **{c: 2 for c in run}}
            with runtime.store.reading() as conn:
                for call_id in run:
                    events = [row["event"] for row in audit.query(conn, call_id=call_id)]
                    assert events == [AuditEvent.QUEUED, AuditEvent.RETRY, AuditEvent.OK]
            assert runtime.verify_audit().ok
        finally:
            stop_group(worker)
            notifier.client.close()
            later.close()
