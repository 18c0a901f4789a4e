"""PostgreSQL crashing (the idempotency page's "PostgreSQL crashing"): what a commit that
did not wait for the disk can lose, and what it cannot.

A server of the test's own, with the helpers that write its log on their own stopped, so
that only a durable commit puts the log on disk; then every one of its processes killed
at once and the server started again, which replays the log it finds. Real PostgreSQL
and Redis; the dispatcher and the executor in-process, as the API and the worker call
them, on a fake clock for the reconciler.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.cli.privredis import free_port
from router.clock import FakeClock
from router.db.engine import make_engine
from router.db.migrate import upgrade
from router.db.rows import CallRow
from router.dispatch.submission import Submission
from router.runtime import Runtime
from router.status import CallStatus
from workers.execution import Executor
from workers.execution.run_outcome import RunOutcome

from ..support.audit import call_audit_events
from ..support.calls import queue_call
from ..support.private_postgres import CrashablePostgres
from ..support.waiting import wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def server() -> Iterator[CrashablePostgres]:
    # PostgreSQL's own user must reach its folder: not under the tests' 0700 tree.
    folder = Path(tempfile.mkdtemp(prefix="tr-crash-pg-"))
    server: CrashablePostgres | None = None
    try:
        server = CrashablePostgres(folder / "pg", free_port())
        server.start()
        yield server
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def database_url(server: CrashablePostgres) -> str:
    url = server.create_database("toolrouter")
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def executor(runtime: Runtime) -> Iterator[Executor]:
    notifier = runtime.notifier()
    yield Executor(runtime, notifier, actor="test-worker")
    notifier.client.close()


def crash_and_restart(server: CrashablePostgres, runtime: Runtime) -> None:
    server.crash()
    runtime.engine.dispose()  # its connections died with the server
    server.start()


def stored(runtime: Runtime, call_id: str) -> CallRow | None:
    with runtime.store.reading() as conn:
        return runtime.store.get(conn, call_id)


def verifies(runtime: Runtime) -> bool:
    return runtime.verify_audit().ok


def test_a_crash_undoes_a_waited_accept_whole_and_keeps_a_durable_one(
    server: CrashablePostgres, runtime: Runtime
) -> None:
    """The waited caller had been told nothing: its call is gone with its audit row, the
    chain still verifies. A call accepted durably just before it is all there."""
    server.hold_log()
    told = runtime.dispatcher.submit_many([Submission("agent", "echo", {"n": 1})])[0]
    waited = runtime.dispatcher.submit_many([Submission("agent", "echo", {"n": 2}, waited=True)])[0]
    assert told.status == waited.status == CallStatus.QUEUED
    assert told.call_id is not None and waited.call_id is not None
    crash_and_restart(server, runtime)

    kept = stored(runtime, told.call_id)
    assert kept is not None and kept.status == CallStatus.QUEUED
    assert call_audit_events(runtime, told.call_id) == ["queued"]
    assert stored(runtime, waited.call_id) is None
    assert call_audit_events(runtime, waited.call_id) == []
    assert verifies(runtime)
    print("[postgresql] crash after two accepts: durable kept=1 waited undone=1 chain verifies")


def test_a_crash_undoes_an_idempotent_claim_and_the_call_runs_again(
    server: CrashablePostgres,
    runtime: Runtime,
    executor: Executor,
    clock: FakeClock,
    tmp_path: Path,
) -> None:
    """Both runs are under way when the server dies. The claim that waited for the disk
    is still there and its run's outcome lands. The idempotent tool's claim is undone and
    the reconciler sends the call again; its second run has the attempt number of the
    first, still going, whose outcome is fenced off by the claim's time."""
    release = tmp_path / "release"  # run N of a call waits for release.N
    runs = {tool: tmp_path / f"runs-{tool}" for tool in ("ledger", "ledger_idempotent")}
    calls = {
        tool: queue_call(runtime, tool, {"path": str(path), "until": str(release)})
        for tool, path in runs.items()
    }
    server.hold_log()
    outcomes: dict[str, RunOutcome] = {}

    def run(name: str, tool: str) -> threading.Thread:
        thread = threading.Thread(
            target=lambda: outcomes.update({name: executor.run(calls[tool], tool)})
        )
        thread.start()
        return thread

    def released(number: int, threads: list[threading.Thread]) -> None:
        Path(f"{release}.{number}").touch()
        for thread in threads:
            thread.join(timeout=120)
            assert not thread.is_alive()

    first = []
    try:
        for tool, path in runs.items():
            first.append(run(tool, tool))
            wait_for_runs(path, 1)  # claimed, and running until released
        crash_and_restart(server, runtime)

        durable = stored(runtime, calls["ledger"])
        undone = stored(runtime, calls["ledger_idempotent"])
        assert durable is not None and (durable.status, durable.attempt) == (CallStatus.RUNNING, 1)
        assert undone is not None and (undone.status, undone.attempt) == (CallStatus.QUEUED, 0)

        clock.advance(int(runtime.settings.requeue_after_s * 1000) + 1)
        assert executor.reconcile() == 1
        again = run("again", "ledger_idempotent")
        wait_for_runs(runs["ledger_idempotent"], 2)
        # The first runs end while the second holds the call under the same attempt.
        released(1, first)
        assert outcomes == {"ledger": RunOutcome.OK, "ledger_idempotent": RunOutcome.FENCED}
        released(2, [again])
        assert outcomes["again"] == RunOutcome.OK
    finally:
        for number in (1, 2):  # no thread outlives the test
            Path(f"{release}.{number}").touch()
    for tool, call_id in calls.items():
        row = stored(runtime, call_id)
        assert row is not None and (row.status, row.attempt) == (CallStatus.SUCCEEDED, 1), tool
    ran = {tool: len(path.read_text().splitlines()) for tool, path in runs.items()}
    assert ran == {"ledger": 1, "ledger_idempotent": 2}
    assert verifies(runtime)
    print(
        "[postgresql] crash during two runs: durable claim kept, its outcome recorded;"
        f" idempotent claim undone, republished, runs={ran['ledger_idempotent']},"
        " the first run's outcome fenced"
    )


def wait_for_runs(path: Path, count: int) -> None:
    def started() -> bool:
        return path.exists() and path.read_text().count("\n") >= count

    wait_for(started, 60, f"{count} runs in {path}")
