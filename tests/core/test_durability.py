"""Which commits wait for the disk (``router.db.durability``): on PostgreSQL, a claim of an
idempotent tool's call commits without waiting; everything else waits. Real PostgreSQL
and SQLite, real Redis; the executor in-process, as the Celery task calls it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from router.db.durability import commit_durably
from router.runtime import Runtime
from workers.execution import Executor
from workers.execution.run_outcome import RunOutcome

from ..support.calls import queue_call


def setting(conn: Connection) -> str:
    return str(conn.execute(text("SHOW synchronous_commit")).scalar())


@pytest.fixture
def commits(runtime: Runtime) -> Iterator[list[str]]:
    """``synchronous_commit`` as each write transaction of the runtime's engine commits."""
    seen: list[str] = []

    def before_commit(conn: Connection) -> None:
        if conn.dialect.name == "postgresql":
            seen.append(setting(conn))

    event.listen(runtime.engine, "commit", before_commit)
    yield seen
    event.remove(runtime.engine, "commit", before_commit)


@pytest.fixture
def executor(runtime: Runtime) -> Iterator[Executor]:
    notifier = runtime.notifier()
    yield Executor(runtime, notifier, actor="test-worker")
    notifier.client.close()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
def test_a_transaction_not_durable_commits_early_and_alone(runtime: Runtime) -> None:
    store = runtime.store
    with store.transaction(durable=False) as conn:
        assert setting(conn) == "off"
        commit_durably(conn)
        assert setting(conn) == "on"
    with store.transaction(durable=False) as conn:
        assert setting(conn) == "off"
    # The setting ends with its transaction: the pooled connection's next one waits again.
    with store.transaction() as conn:
        assert setting(conn) == "on"
    with store.reading() as conn:
        assert setting(conn) == "on"


def test_a_transaction_not_durable_still_commits(runtime: Runtime, tmp_path: Path) -> None:
    call_id = queue_call(runtime, "ledger", {"path": str(tmp_path / "runs")})
    store = runtime.store
    with store.transaction(durable=False) as conn:
        row = store.claim(conn, call_id, now=runtime.clock(), lease_ms=60_000)
    assert row is not None
    with store.reading() as conn:
        stored = store.get(conn, call_id)
    assert stored is not None and stored.status == "running" and stored.attempt == 1


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("tool", "hint", "claim_waits"),
    [
        # Idempotent: a claim undone by a crash leaves the call queued, to be run again.
        ("ledger_idempotent", "ledger_idempotent", False),
        ("ledger", "ledger", True),  # not idempotent: it must never run twice
        ("ledger", "ledger_idempotent", True),  # a message naming another tool than the call's
        ("ledger_idempotent", None, True),  # no tool named: not known to be idempotent
    ],
)
def test_only_an_idempotent_tools_claim_commits_without_waiting(
    runtime: Runtime,
    executor: Executor,
    commits: list[str],
    tmp_path: Path,
    tool: str,
    hint: str | None,
    claim_waits: bool,
) -> None:
    call_id = queue_call(runtime, tool, {"path": str(tmp_path / "runs")})
    commits.clear()
    assert executor.run(call_id, hint) == RunOutcome.OK
    claim, outcome = commits
    assert claim == ("on" if claim_waits else "off")
    assert outcome == "on"  # the outcome is told to the caller: it always waits
    assert len((tmp_path / "runs").read_text().splitlines()) == 1
