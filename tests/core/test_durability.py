"""Which commits wait for the disk (``router.db.durability``). On PostgreSQL two commits
that nobody learns of before a later durable one do not wait: the claim of an idempotent
tool's call, and the accept of calls whose callers wait for their outcome. Everything
else waits. Real PostgreSQL and SQLite, real Redis; the dispatcher and the executor
in-process, as the API and the Celery task call them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Connection

from router.api.app import create_app
from router.audit import head as audit_head
from router.db.durability import commit_durably
from router.dispatch.submission import Submission
from router.runtime import Runtime
from router.status import CallStatus
from router.trust.keyring import Purpose
from workers.execution import Executor
from workers.execution.run_outcome import RunOutcome

from ..support.calls import queue_call


def setting(conn: Connection) -> str:
    return str(conn.execute(text("SHOW synchronous_commit")).scalar())


def waits_for_disk(conn: Connection) -> bool:
    """Whether this transaction's commit waits until the log is on disk up to it: it
    commits synchronously and has an id (a transaction without one writes no commit
    record, and its commit waits for nothing)."""
    has_id = conn.execute(text("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")).scalar()
    return setting(conn) == "on" and bool(has_id)


@pytest.fixture
def commits(runtime: Runtime) -> Iterator[list[str]]:
    """``synchronous_commit`` as each write transaction of the runtime's engine commits."""
    seen: list[str] = []

    def before_commit(conn: Connection) -> None:
        if conn.dialect.name == "postgresql" and not conn.get_execution_options().get("readonly"):
            seen.append(setting(conn))

    event.listen(runtime.engine, "commit", before_commit)
    yield seen
    event.remove(runtime.engine, "commit", before_commit)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
def test_a_transaction_not_durable_commits_early_and_alone(runtime: Runtime) -> None:
    store = runtime.store
    runtime.engine.dispose()  # one pooled connection from here on, used in turn

    def backend(conn: Connection) -> int:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

    with store.transaction(durable=False) as conn:
        assert setting(conn) == "off"
        commit_durably(conn)
        assert setting(conn) == "on"
    with store.transaction(durable=False) as conn:
        assert setting(conn) == "off"
        early = backend(conn)
    # The setting ends with its transaction: the connection's next one waits again.
    with store.transaction() as conn:
        assert setting(conn) == "on"
        assert backend(conn) == early
    with store.reading() as conn:
        assert setting(conn) == "on"
    # Only the transaction begun early: one begun inside it waits for the disk.
    with store.transaction(durable=False) as conn, store.transaction() as inner:
        assert (setting(conn), setting(inner)) == ("off", "on")


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


WAITED = Submission("agent", "echo", {"n": 1}, waited=True)
NOT_WAITED = Submission("agent", "echo", {"n": 2})
GATED_WAITED = Submission("agent", "high_echo", {"n": 3}, waited=True)
REFUSED_WAITED = Submission("agent", "no-such-tool", {}, waited=True)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("group", "accept_waits"),
    [
        # Each caller waits for the outcome, whose commit waits for the disk.
        ([WAITED, WAITED], False),
        ([WAITED, NOT_WAITED], True),  # one caller is told "queued" at once
        ([WAITED, GATED_WAITED], True),  # approvers are told of the request at once
        ([WAITED, REFUSED_WAITED], True),  # the refusal is answered, and audited, at once
    ],
)
def test_only_a_group_of_waited_runnable_calls_is_accepted_without_waiting(
    runtime: Runtime, commits: list[str], group: list[Submission], accept_waits: bool
) -> None:
    results = runtime.dispatcher.submit_many(group)
    assert results[0].status == CallStatus.QUEUED
    assert commits == ["on" if accept_waits else "off"]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
def test_waiting_for_the_disk_commits_a_record_synchronously(runtime: Runtime) -> None:
    """What a waited call that did not finish in time passes through before its caller is
    told it was accepted: the log on disk up to a commit after the accept's."""
    seen: list[bool] = []

    def before_commit(conn: Connection) -> None:
        seen.append(waits_for_disk(conn))

    runtime.dispatcher.submit_many([WAITED])
    event.listen(runtime.engine, "commit", before_commit)
    try:
        runtime.store.wait_for_disk()
    finally:
        event.remove(runtime.engine, "commit", before_commit)
    assert seen == [True]


def test_waiting_for_the_disk_works_on_every_database(runtime: Runtime) -> None:
    runtime.dispatcher.submit_many([WAITED])
    runtime.store.wait_for_disk()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
def test_a_waited_call_not_finished_in_time_is_answered_once_on_disk(runtime: Runtime) -> None:
    """No worker runs: the wait runs out, and the caller is told "queued" only after a
    commit that waits for the disk, after the accept that did not."""
    app = create_app(runtime)
    key = runtime.keys.create("agent", ["agent"])
    seen: list[bool] = []

    def before_commit(conn: Connection) -> None:
        if not conn.get_execution_options().get("readonly"):
            seen.append(waits_for_disk(conn))

    async def submit() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.post(
                "/v1/calls",
                json={"tool": "echo", "args": {"n": 1}, "wait_s": 0.2},
                headers={"Authorization": f"Bearer {key}"},
            )

    event.listen(runtime.engine, "commit", before_commit)
    try:
        response = asyncio.run(submit())
    finally:
        event.remove(runtime.engine, "commit", before_commit)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "queued"
    assert seen == [False, True]  # the accept, then the wait for the disk


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.postgres
def test_a_signed_audit_head_covers_only_rows_on_disk(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accept that did not wait for the disk, then the head signed: the disk is waited
    for first, so a crash cannot undo a row the signed head names."""
    runtime.dispatcher.submit_many([WAITED])
    seen: list[str] = []
    sign = runtime.keyring.sign

    def before_commit(conn: Connection) -> None:
        if not conn.get_execution_options().get("readonly"):
            seen.append("disk" if waits_for_disk(conn) else "early")

    def signing(purpose: Purpose, data: bytes | str) -> str:
        seen.append("signed")
        return sign(purpose, data)

    monkeypatch.setattr(runtime.keyring, "sign", signing)
    event.listen(runtime.engine, "commit", before_commit)
    try:
        head = audit_head.current(runtime.store, runtime.keyring, "test", runtime.clock)
    finally:
        event.remove(runtime.engine, "commit", before_commit)
    assert seen == ["disk", "signed"]
    assert head.seq >= 1 and head.verifies(runtime.keyring)
