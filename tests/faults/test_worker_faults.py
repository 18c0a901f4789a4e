"""Faults against real Celery workers (SPEC §4, §6): the worker survives, no call is lost
or run twice.

Calls that kill nothing use the shared session ``stack``. Tests that SIGKILL pool
processes, or need the reaper and reconciler running, get their own toolrouter (own
database, own Redis db, a worker on the tool queues, one on ``maintenance`` and
``celery beat``), so the kills never disturb another test.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from router.audit.log import locked_head
from router.dispatch.dispatcher import Dispatcher
from router.messaging.celery_app import make_celery
from router.messaging.publisher import Publisher
from router.messaging.run_message import Precedence, message_for
from router.runtime import Runtime
from router.status import TERMINAL_STATES, AuditEvent, CallStatus

from ..support import services
from ..support.audit import call_audit_events, call_audit_rows
from ..support.calls import queue_call
from ..support.faults import FAST_RECOVERY
from ..support.stack import Stack, stack_env, start_with_recovery
from ..support.waiting import wait_for, wait_until_a_transaction_waits, wait_until_finished

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
# Redis dbs of the fault stacks: apart from the session stacks (11, 12) and unit tests (13).
FAULT_REDIS_DBS = {"sqlite": 14, "postgresql": 15}

KILLS = 5  # pool processes killed mid-run of the non-idempotent ``ledger``
IDEMPOTENT_KILLS = 2  # and mid-run of ``ledger_idempotent``, which must run again
BACKGROUND_PER_KILL = 3  # ordinary ``ledger`` calls submitted around each kill
WORKER_LOST = "worker lost during the run; outcome unknown"


# -- helpers -----------------------------------------------------------------------------


def deadline_after(seconds: float) -> float:
    return time.monotonic() + seconds


def ledger_runs(path: Path) -> dict[str, list[tuple[int, int]]]:
    """``call id -> [(attempt, pid), ...]`` from a ``ledger`` tool's file."""
    runs: dict[str, list[tuple[int, int]]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            call_id, attempt, *pid = line.split()
            runs.setdefault(call_id, []).append((int(attempt), int(pid[0]) if pid else 0))
    return runs


def wait_for_run(path: Path, call_id: str, attempt: int = 1, timeout: float = 30) -> int:
    """The pid of the pool process that started attempt ``attempt`` of ``call_id``."""
    deadline = deadline_after(timeout)
    while time.monotonic() < deadline:
        for run_attempt, pid in ledger_runs(path).get(call_id, []):
            if run_attempt == attempt:
                return pid
        time.sleep(0.02)
    raise AssertionError(f"{call_id} attempt {attempt} did not start within {timeout} s")


def pool_pids(worker: psutil.Process) -> set[int]:
    return {child.pid for child in worker.children()}


def messages_mentioning(runtime: Runtime, client: redis.Redis, queue: str, call_id: str) -> int:
    """Messages for ``call_id`` still waiting in ``queue``, or taken by a worker and not yet
    done with (reserved or running there, as the workers themselves report)."""
    needle = call_id.encode()
    waiting = sum(needle in raw for raw in client.lrange(queue, 0, -1))
    inspect = runtime.celery.control.inspect(timeout=1.0)
    taken = 0
    for report in (inspect.reserved() or {}, inspect.active() or {}):
        for tasks in report.values():
            taken += sum(call_id in str(task.get("args")) for task in tasks)
    return waiting + taken


def close_runtime(runtime: Runtime) -> None:
    if "celery" in runtime.__dict__:
        runtime.celery.close()
    runtime.close()


@pytest.fixture
def stack_runtime(stack: Stack) -> Iterator[Runtime]:
    """An in-process runtime on the session stack's database and Redis."""
    runtime = Runtime(stack.settings)
    runtime.prepare()
    yield runtime
    close_runtime(runtime)


# -- on the shared stack: nothing gets killed by the test ---------------------------------


@pytest.mark.parametrize(
    ("tool", "error", "error_type"),
    [
        ("system_exit", "3", "SystemExit"),
        ("keyboard_interrupt", "KeyboardInterrupt", "KeyboardInterrupt"),
        ("unprintable_error", "Unprintable", "Unprintable"),
        ("impatient_error", "asks for no wait", "Impatient"),
    ],
)
def test_handler_raising_system_exit_fails_its_call_and_the_worker_keeps_serving(
    stack: Stack, tmp_path: Path, tool: str, error: str, error_type: str
) -> None:
    worker = psutil.Process(stack.processes["worker"].pid)
    pool = pool_pids(worker)
    assert pool

    with stack.client() as http:
        failed = http.post("/v1/calls", json={"tool": tool, "args": {}, "wait_s": 30}).json()
        after = http.post(
            "/v1/calls",
            json={"tool": "ledger", "args": {"path": str(tmp_path / "l.txt")}, "wait_s": 30},
        ).json()

    assert failed == {
        "ok": False,
        "call_id": failed["call_id"],
        "tool": tool,
        "status": "failed",
        "error": error,
        "error_type": error_type,
    }
    assert after["status"] == "succeeded", after
    # The same pool processes: none of them was taken down and replaced.
    assert after["value"]["pid"] in pool
    assert pool_pids(worker) == pool
    assert worker.is_running()


def test_a_retry_asked_for_after_an_endless_wait_is_scheduled_a_day_later(
    stack: Stack, stack_runtime: Runtime
) -> None:
    with stack.client() as http:
        call_id = http.post("/v1/calls", json={"tool": "retryable_after_ever", "args": {}}).json()[
            "call_id"
        ]
        try:
            retried = wait_for(
                lambda: [
                    row
                    for row in call_audit_rows(stack_runtime, call_id)
                    if row["event"] == AuditEvent.RETRY
                ],
                timeout=30,
                what="the retry",
            )
        finally:
            # Not left queued for a day on the shared stack.
            http.delete(f"/v1/calls/{call_id}")
    assert retried[0]["detail"]["delay_s"] == 24 * 3600


def test_a_result_past_the_size_limit_fails_its_call_and_nothing_of_it_is_stored(
    stack: Stack, stack_runtime: Runtime
) -> None:
    limit = stack.settings.max_result_bytes
    with stack.client() as http:
        # A string of ``limit - 1`` characters is ``limit + 1`` bytes of JSON.
        over = http.post(
            "/v1/calls", json={"tool": "sized", "args": {"bytes": limit - 1}, "wait_s": 30}
        ).json()
        within = http.post(
            "/v1/calls", json={"tool": "sized", "args": {"bytes": limit - 2}, "wait_s": 30}
        ).json()

    assert over == {
        "ok": False,
        "call_id": over["call_id"],
        "tool": "sized",
        "status": "failed",
        "error": f"result too large: over the limit of {limit} bytes",
        "error_type": "ResultTooLarge",
    }
    with stack_runtime.store.reading() as conn:
        row = stack_runtime.store.get(conn, over["call_id"])
    assert row is not None and row.value is None
    assert (within["status"], len(within["value"])) == ("succeeded", limit - 2)


def test_a_long_error_message_is_cut_in_the_answer_the_call_and_the_audit_log(
    stack: Stack, stack_runtime: Runtime
) -> None:
    message = "e" * 200_000
    with stack.client() as http:
        failed = http.post(
            "/v1/calls",
            json={"tool": "value_error", "args": {"message": message}, "wait_s": 30},
        ).json()

    assert (failed["status"], failed["error"]) == ("failed", message[:4096])
    audited = call_audit_rows(stack_runtime, failed["call_id"])[-1]
    assert (audited["event"], audited["detail"]["error"]) == (AuditEvent.ERROR, message[:4096])


def test_slow_handler_is_stopped_by_its_timeout(stack: Stack) -> None:
    with stack.client() as http:
        body = http.post(
            "/v1/calls", json={"tool": "slow", "args": {"seconds": 5}, "wait_s": 30}
        ).json()

    assert body["status"] == "failed", body
    assert body["error"] == "timeout after 1 s"
    assert body["error_type"] == "TimeoutError"
    assert body["ok"] is False


def test_handler_that_swallows_the_soft_limit_is_ended_by_the_hard_limit(stack: Stack) -> None:
    worker = psutil.Process(stack.processes["worker"].pid)
    with stack.client() as http:
        submitted = http.post("/v1/calls", json={"tool": "stubborn", "args": {"seconds": 60}})
        call_id = submitted.json()["call_id"]
        # While the stubborn handler holds one pool process, the other one still serves.
        meanwhile = http.post("/v1/calls", json={"tool": "echo", "args": {"n": 1}, "wait_s": 30})
        body = http.get(f"/v1/calls/{call_id}", params={"wait_s": 60}).json()
        after = http.post("/v1/calls", json={"tool": "echo", "args": {"n": 2}, "wait_s": 30})

    assert meanwhile.json()["status"] == "succeeded"
    assert body == {
        "ok": False,
        "call_id": call_id,
        "tool": "stubborn",
        "status": "failed",
        "error": "timeout after 1 s",
        "error_type": "TimeoutError",
    }
    assert after.json() == {
        "ok": True,
        "call_id": after.json()["call_id"],
        "tool": "echo",
        "status": "succeeded",
        "value": {"n": 2},
    }
    assert worker.is_running()


@pytest.mark.parametrize(
    "stack", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_an_outcome_whose_commit_outlasts_the_soft_limit_is_kept(
    stack: Stack, stack_runtime: Runtime, tmp_path: Path
) -> None:
    # The soft limit stops a handler, never the commit of the outcome it produced: struck
    # there, it would roll the outcome back and leave the call running, for the reaper to
    # mark ``interrupted`` although its run succeeded. The test holds the audit chain's
    # lock, which every outcome's commit takes, from the handler's end until past the
    # tool's limit (PostgreSQL shows who waits for a lock; SQLite does not).
    path, until = tmp_path / "ledger.txt", tmp_path / "until"
    call_id = queue_call(stack_runtime, "ledger", {"path": str(path), "until": str(until)})
    wait_for_run(path, call_id)
    run_seen = time.monotonic()
    tool = stack_runtime.registry.get("ledger")
    assert tool is not None

    with stack_runtime.store.transaction() as conn:
        locked_head(conn)
        Path(f"{until}.1").touch()  # the handler returns; its outcome's commit waits
        wait_until_a_transaction_waits(stack_runtime, "advisory")
        wait_for(lambda: time.monotonic() - run_seen > tool.spec.timeout_s + 2, 30, "soft limit")

    row = wait_until_finished(stack_runtime, [call_id], timeout=60)[call_id]

    assert row.status == CallStatus.SUCCEEDED, (row.status, row.error)
    assert len(ledger_runs(path)[call_id]) == 1


def test_duplicated_message_runs_the_handler_once(
    stack: Stack, stack_runtime: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    # The first run sleeps within the tool's 5 s limit, long enough for the probe below.
    call_id = queue_call(stack_runtime, "ledger", {"path": str(path), "sleep": 4})
    tool = stack_runtime.registry.get("ledger")
    assert tool is not None
    # Two more messages for the same call, racing its first run.
    message = message_for(tool, call_id, Precedence.INTERACTIVE)
    stack_runtime.publisher.publish([message, message])
    broker = redis.Redis.from_url(stack.settings.redis_url)
    try:
        # While the first run sleeps its message is active in a worker: the probe must see
        # it (each look waits for the workers' replies, which a loaded machine delays).
        wait_for_run(path, call_id)
        sleeping_until = deadline_after(4)
        seen = 0
        while not seen and time.monotonic() < sleeping_until:
            seen = messages_mentioning(stack_runtime, broker, tool.queue, call_id)
        assert seen >= 1
        with stack.client() as http:
            body = http.get(f"/v1/calls/{call_id}", params={"wait_s": 30}).json()
        assert body["status"] == "succeeded", body

        # Every message for the call has been taken and worked off before the ledger is read.
        deadline = deadline_after(30)
        while (
            messages_mentioning(stack_runtime, broker, tool.queue, call_id)
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert messages_mentioning(stack_runtime, broker, tool.queue, call_id) == 0
    finally:
        broker.close()
    assert [attempt for attempt, _ in ledger_runs(path)[call_id]] == [1]
    assert call_audit_events(stack_runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.OK]


# -- on a stack of its own: pool processes get killed -------------------------------------


@dataclass
class FaultStack:
    stack: Stack
    runtime: Runtime
    # A ``stubborn`` call submitted as the stack starts: its hard limit (timeout + 10 s)
    # runs out while the other tests run, and the last test checks how it ended.
    stubborn_call: str

    @property
    def tool_worker(self) -> psutil.Process:
        return psutil.Process(self.stack.processes["tools"].pid)


@pytest.fixture(scope="module", params=BACKENDS)
def fault_stack(
    request: pytest.FixtureRequest, redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultStack]:
    """Workers on the tool queues and on ``maintenance``, and ``celery beat`` running the
    reaper and the reconciler twice a second, with the shortest leases allowed."""
    backend = request.param
    state_dir = tmp_path_factory.mktemp(f"faults-{backend}")
    databases = services.database_for(backend, state_dir, request)
    database_url = next(databases)
    redis_url = f"{redis_base}/{FAULT_REDIS_DBS[backend]}"
    services.flush(redis_url)
    env = stack_env(
        database_url=database_url,
        redis_url=redis_url,
        state_dir=state_dir,
        # Recovery as fast as the settings allow: the kill test waits on leases running out.
        TOOLROUTER_LEASE_GRACE_S="1",
        **FAST_RECOVERY,
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare()
    try:
        start_with_recovery(stack, tool_concurrency=4, api=False)
        stubborn = queue_call(runtime, "stubborn", {"seconds": 60})
        yield FaultStack(stack, runtime, stubborn)
    finally:
        stack.stop_all()
        close_runtime(runtime)
        services.flush(redis_url)
        databases.close()


def test_sigkilled_pool_processes_lose_no_call_and_run_none_twice(
    fault_stack: FaultStack, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime, worker = fault_stack.runtime, fault_stack.tool_worker
    ledger = fault_stack.stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt"
    crashes = fault_stack.stack.state_dir / f"crashes-{uuid.uuid4().hex[:8]}.txt"

    poison = queue_call(runtime, "crash_idempotent", {"path": str(crashes)})
    victims: dict[str, str] = {}
    background: list[str] = []
    for kill in range(KILLS + IDEMPOTENT_KILLS):
        tool = "ledger" if kill < KILLS else "ledger_idempotent"
        victim = queue_call(runtime, tool, {"path": str(ledger), "sleep": 3})
        victims[victim] = tool
        background += [
            queue_call(runtime, "ledger", {"path": str(ledger)}) for _ in range(BACKGROUND_PER_KILL)
        ]
        pid = wait_for_run(ledger, victim)
        assert pid in pool_pids(worker), f"{pid} is not a pool process of the worker"
        os.kill(pid, signal.SIGKILL)

    everything = [poison, *victims, *background]
    rows = wait_until_finished(runtime, everything, timeout=75)
    runs = ledger_runs(ledger)

    expected: dict[str, tuple[str, int]] = {poison: (CallStatus.FAILED, 3)}
    for call_id, tool in victims.items():
        idempotent = tool == "ledger_idempotent"
        expected[call_id] = (CallStatus.SUCCEEDED, 2) if idempotent else (CallStatus.INTERRUPTED, 1)
    expected.update({call_id: (CallStatus.SUCCEEDED, 1) for call_id in background})
    poison_runs = [int(line.split()[1]) for line in crashes.read_text().splitlines()]

    def run_count(call_id: str) -> int:
        return len(poison_runs) if call_id == poison else len(runs.get(call_id, []))

    # Lost: never finished, or finished without its handler ever having run.
    lost = [c for c in everything if rows[c].status not in TERMINAL_STATES or not run_count(c)]
    unexpected = [c for c in everything if (rows[c].status, run_count(c)) != expected[c]]
    non_idempotent = [c for c in [*background, *victims] if victims.get(c, "ledger") == "ledger"]
    duplicated = [c for c in non_idempotent if run_count(c) > 1]
    interrupted = [c for c in everything if rows[c].status == CallStatus.INTERRUPTED]
    with capsys.disabled():
        print(
            f"\n[{fault_stack.runtime.engine.dialect.name}] kills={KILLS + IDEMPOTENT_KILLS}"
            f" calls={len(everything)} lost={len(lost)} duplicated={len(duplicated)}"
            f" interrupted={len(interrupted)} poison_runs={len(poison_runs)}"
        )

    details = {c: (rows[c].status, run_count(c), expected[c], rows[c].error) for c in unexpected}
    assert lost == [], details
    assert duplicated == [], details
    assert unexpected == [], details
    assert sorted(interrupted) == sorted(c for c, t in victims.items() if t == "ledger")
    for call_id in interrupted:
        assert (rows[call_id].error, rows[call_id].error_type) == (WORKER_LOST, "WorkerLost")
        assert call_audit_events(runtime, call_id)[-1] == AuditEvent.INTERRUPTED
    for call_id, tool in victims.items():
        if tool == "ledger_idempotent":
            assert [attempt for attempt, _ in runs[call_id]] == [1, 2]
            assert AuditEvent.RETRY in call_audit_events(runtime, call_id)
    assert poison_runs == [1, 2, 3]
    assert (rows[poison].error, rows[poison].error_type) == (
        "poison call: its run was lost 3 times",
        "PoisonCall",
    )
    assert call_audit_events(runtime, poison) == [
        AuditEvent.QUEUED,
        AuditEvent.RETRY,
        AuditEvent.RETRY,
        AuditEvent.ERROR,
    ]

    # The worker itself never went down, and it still serves.
    assert worker.is_running()
    after = queue_call(runtime, "echo", {"after": "kills"})
    assert wait_until_finished(runtime, [after], timeout=30)[after].status == CallStatus.SUCCEEDED


def test_lost_message_is_published_again_by_the_reconciler(fault_stack: FaultStack) -> None:
    runtime = fault_stack.runtime
    # Accept a call but publish its message where no worker of this stack listens: as if
    # Redis lost it.
    # (If the other fault stack happens to be up, its worker finds no such call and drops it.)
    elsewhere = {"sqlite": 15, "postgresql": 14}[runtime.engine.dialect.name]
    black_hole_url = runtime.settings.redis_url.rsplit("/", 1)[0] + f"/{elsewhere}"
    black_hole = make_celery(black_hole_url, runtime.namespace)
    try:
        dispatcher = Dispatcher(
            runtime.store, runtime.registry, Publisher(black_hole), runtime.audit, runtime.keyring
        )
        result = dispatcher.submit("agent", "echo", {"lost": True})
    finally:
        black_hole.close()
    assert result.status == CallStatus.QUEUED and result.call_id is not None

    try:
        row = wait_until_finished(runtime, [result.call_id], timeout=30)[result.call_id]
    finally:
        leftovers = redis.Redis.from_url(black_hole_url)
        queue = runtime.namespace.prefix + "tools.low"
        for raw in leftovers.lrange(queue, 0, -1):
            if result.call_id.encode() in raw:
                leftovers.lrem(queue, 0, raw)
        leftovers.close()

    assert (row.status, row.attempt) == (CallStatus.SUCCEEDED, 1)
    assert row.result().value == {"lost": True}


def test_hard_time_limit_ends_a_stubborn_handler_before_the_reaper_gives_up_on_it(
    fault_stack: FaultStack,
) -> None:
    # With the reaper running, a handler that swallows its soft limit must still end as a
    # timeout (SPEC §10), not be declared lost while its worker is alive and killing it.
    runtime, call_id = fault_stack.runtime, fault_stack.stubborn_call

    row = wait_until_finished(runtime, [call_id], timeout=40)[call_id]

    assert (row.status, row.error, row.error_type) == (
        CallStatus.FAILED,
        "timeout after 1 s",
        "TimeoutError",
    )
    assert call_audit_events(runtime, call_id) == [AuditEvent.QUEUED, AuditEvent.ERROR]
