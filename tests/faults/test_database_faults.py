"""The database unavailable for a moment, and racing submissions (SPEC §6, §8, §14).

- PostgreSQL refusing connections (``ALLOW_CONNECTIONS false`` and every backend
  terminated) while calls stream in over HTTP: the API answers 503 JSON, no call row exists
  without its audit row or the other way round, the chain verifies, and work resumes by
  itself once the database is back. (SQLite has no outage of its own short of a lock held
  past the busy timeout; the outage runs on PostgreSQL.)
- 16 threads submitting one idempotency key at once: exactly one call, on both backends.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from router.db.schema import audit_log, calls
from router.ids import new_token
from router.runtime import Runtime
from router.status import AuditEvent, CallStatus

from ..support.audit import audit_events
from ..support.faults import ledger_runs
from ..support.pg_outage import PgFaultStack, logged, newest_hold, pg_outage_stack
from ..support.stack import Stack
from ..support.waiting import wait_for, wait_until_finished

# A Redis db of its own (the suite's dbs are 11-15); flushed before and after.
REDIS_DB = 10
RACERS = 16


# -- the outage (PostgreSQL) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_fault_stack(
    request: pytest.FixtureRequest, redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgFaultStack]:
    with pg_outage_stack(request, f"{redis_base}/{REDIS_DB}", tmp_path_factory) as stack:
        yield stack


def ledger_call(ledger: str, key: str) -> dict[str, Any]:
    return {"tool": "ledger_idempotent", "args": {"path": ledger}, "idempotency_key": key}


class Submitter(threading.Thread):
    """Submits calls over HTTP, one idempotency key each, until stopped (at most ``limit``)."""

    def __init__(self, stack: Stack, ledger: str, limit: int = 400) -> None:
        super().__init__(daemon=True)
        self.stack, self.ledger, self.limit = stack, ledger, limit
        self.answers: list[tuple[str, int, dict[str, Any]]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def count(self, status: int) -> int:
        return sum(1 for _, code, _ in list(self.answers) if code == status)

    def run(self) -> None:
        try:
            with self.stack.client(timeout=30) as http:
                for _ in range(self.limit):
                    if self.stop.is_set():
                        return
                    key = uuid.uuid4().hex
                    response = http.post("/v1/calls", json=ledger_call(self.ledger, key))
                    self.answers.append((key, response.status_code, response.json()))
                    self.stop.wait(0.02)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["ok"] is False, body
    assert body["error"].startswith("unavailable: "), body
    assert set(body) <= {"ok", "error", "tool", "status"}, body


@pytest.mark.postgres
def test_database_outage_answers_503_writes_nothing_by_halves_and_work_resumes(
    pg_fault_stack: PgFaultStack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, runtime = pg_fault_stack.stack, pg_fault_stack.runtime
    ledger = str(stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt")
    with stack.client() as http:
        before = http.post("/v1/calls", json={"tool": "echo", "args": {"n": 0}, "wait_s": 30})
        assert before.json()["status"] == "succeeded", before.text

    submitter = Submitter(stack, ledger)
    submitter.start()
    try:
        wait_for(lambda: submitter.count(200) >= 10, 30, "10 accepted calls")
        pg_fault_stack.outage(True)
        try:
            wait_for(lambda: submitter.count(503) >= 5, 30, "5 answers of 503")
            with stack.client("operator") as http:
                assert_unavailable(http.get(f"/v1/calls/{before.json()['call_id']}"))
                assert_unavailable(http.get("/v1/tools"))
                assert_unavailable(http.get("/v1/audit"))
            with stack.client("") as http:
                assert_unavailable(http.get("/readyz"))
                assert http.head("/readyz").status_code == 503
        finally:
            pg_fault_stack.outage(False)
        accepted_during = submitter.count(200)
        wait_for(lambda: submitter.count(200) >= accepted_during + 10, 30, "calls accepted again")
    finally:
        submitter.stop.set()
        submitter.join(timeout=60)
    assert submitter.error is None, submitter.error
    answers = submitter.answers
    codes = sorted({code for _, code, _ in answers})
    assert set(codes) <= {200, 503}, [a for a in answers if a[1] not in (200, 503)][:3]
    for _, code, body in answers:
        if code == 503:
            assert body["ok"] is False and body["error"].startswith("unavailable: "), body

    # Every call that was refused with 503 is retried with its idempotency key, as a client
    # would: the retry makes the call, or finds the one whose commit the 503 hid.
    refused = [key for key, code, _ in answers if code == 503]
    with stack.client() as http:
        retried = {
            key: http.post(
                "/v1/calls",
                json={
                    "tool": "ledger_idempotent",
                    "args": {"path": ledger},
                    "idempotency_key": key,
                },
            )
            for key in refused
        }
    assert {response.status_code for response in retried.values()} <= {200}
    accepted = {key: str(body["call_id"]) for key, code, body in answers if code == 200}
    accepted.update({key: str(response.json()["call_id"]) for key, response in retried.items()})

    rows = wait_until_finished(runtime, sorted(accepted.values()), timeout=60)
    unfinished = {
        c: r.status if r else None
        for c, r in rows.items()
        if r is None or r.status != CallStatus.SUCCEEDED
    }
    runs = ledger_runs(Path(ledger))
    with runtime.store.reading() as conn:
        call_rows = conn.execute(
            select(calls.c.id, calls.c.idempotency_key, calls.c.status).where(
                calls.c.tool == "ledger_idempotent"
            )
        ).all()
        every_call = set(conn.execute(select(calls.c.id)).scalars())
        queued_rows = conn.execute(
            select(audit_log.c.call_id, func.count())
            .where(audit_log.c.event == AuditEvent.QUEUED)
            .group_by(audit_log.c.call_id)
        ).all()
        audited_ids = {
            row.call_id
            for row in conn.execute(
                select(audit_log.c.call_id).where(audit_log.c.call_id.is_not(None)).distinct()
            )
        }
        report = runtime.verify_audit()
        checked, bad_seq, reason = (
            report.checked,
            report.problems[0].seq if report.problems else None,
            str(report.problems[0]) if report.problems else None,
        )
    queued_audit = {call_id: n for call_id, n in queued_rows}
    # Half-written: a call without its ``queued`` row, or an audit row naming no call.
    without_audit = sorted(c for c in every_call if queued_audit.get(c) != 1)
    orphan_audit = sorted(audited_ids - every_call)
    keys_with_two_calls = len(call_rows) - len({row.idempotency_key for row in call_rows})
    with capsys.disabled():
        print(
            f"\n[postgresql] database outage: submitted={len(answers)}"
            f" accepted={len(answers) - len(refused)} refused_503={len(refused)}"
            f" retried_ok={len(retried)} calls={len(call_rows)} finished="
            f"{len(accepted) - len(unfinished)} lost={len(unfinished)}"
            f" half_written={len(without_audit) + len(orphan_audit)}"
            f" reruns_of_idempotent={sum(n - 1 for n in runs.values() if n > 1)}"
            f" 500s={sum(1 for _, code, _ in answers if code == 500)}"
        )
    assert len(refused) >= 5
    assert unfinished == {}
    assert without_audit == [] and orphan_audit == []
    assert keys_with_two_calls == 0
    assert len(call_rows) == len(accepted)
    assert {row.status for row in call_rows} == {CallStatus.SUCCEEDED}
    assert all(runs.get(call_id) for call_id in accepted.values())
    assert (bad_seq, reason) == (None, None) and checked > 0

    # The same processes serve again: nothing was restarted.
    with stack.client() as http:
        after = http.post("/v1/calls", json={"tool": "echo", "args": {"n": 1}, "wait_s": 30})
    assert after.json()["status"] == "succeeded", after.text


# -- one idempotency key, many submissions at once (both backends) --------------------------


@pytest.mark.postgres
def test_an_outcome_waits_out_a_database_outage_rather_than_being_lost(
    pg_fault_stack: PgFaultStack, tmp_path: Path
) -> None:
    """The database gone as a handler returns: the outcome is committed once it is back.
    Given up at the first refusal, the run was left to the reaper, which called it
    ``interrupted`` (SPEC §4: a worker that died) although it had finished."""
    stack, runtime = pg_fault_stack.stack, pg_fault_stack.runtime
    release = tmp_path / "release"
    with stack.client() as http:
        submitted = http.post("/v1/calls", json={"tool": "hold", "args": {"until": str(release)}})
    call_id = submitted.json()["call_id"]
    wait_for(lambda: newest_hold(runtime) == (call_id, "running"), 60, "the call running")
    pg_fault_stack.outage(True)
    try:
        release.touch()
        refused = f"could not record the outcome of {call_id}"
        wait_for(lambda: logged(stack, "tools", refused), 60, "the outcome's commit refused")
    finally:
        pg_fault_stack.outage(False)
    row = wait_until_finished(runtime, [call_id], timeout=60)[call_id]
    assert row.status == CallStatus.SUCCEEDED, row
    assert [event for event, _ in audit_events(stack, call_id)] == ["queued", "ok"]


def race(stack: Stack, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """POST every body at once, from its own thread and connection."""
    barrier = threading.Barrier(len(bodies))

    def post(body: dict[str, Any]) -> httpx.Response:
        with stack.client() as http:
            barrier.wait(timeout=30)
            return http.post("/v1/calls", json=body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(post, bodies))


def calls_with_key(stack: Stack, key: str) -> list[Any]:
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.reading() as conn:
            rows = conn.execute(
                select(calls.c.id).where(
                    calls.c.requested_by == "agent", calls.c.idempotency_key == key
                )
            ).all()
            queued = conn.execute(
                select(func.count()).where(
                    audit_log.c.call_id.in_([row.id for row in rows]),
                    audit_log.c.event == AuditEvent.QUEUED,
                )
            ).scalar_one()
    finally:
        runtime.close()
    assert queued == len(rows), "a call without its audit row, or the other way round"
    return [row.id for row in rows]


@pytest.mark.postgres
def test_sign_ins_the_database_could_not_check_do_not_count_against_the_address(
    pg_fault_stack: PgFaultStack,
) -> None:
    """A key that could not be checked is not a wrong key: sign-ins answered 503 during
    the outage leave the address its full allowance of failures afterwards."""
    stack = pg_fault_stack.stack
    allowed = stack.settings.ui_login_failures_per_minute

    def sign_in(http: httpx.Client) -> int:
        # Well-formed and never issued: only the database can tell it is wrong.
        key = new_token()
        response = http.post("/ui/login", data={"key": key}, headers={"Origin": stack.base_url})
        return response.status_code

    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        pg_fault_stack.outage(True)
        try:
            during = [sign_in(http) for _ in range(allowed + 2)]
        finally:
            pg_fault_stack.outage(False)
        wait_for(lambda: http.get("/readyz").status_code == 200, 60, "the API ready again")
        after = [sign_in(http) for _ in range(allowed + 1)]
    assert during == [503] * (allowed + 2)
    assert after == [401] * allowed + [429]


@pytest.mark.parametrize("round_", range(3))
def test_concurrent_submissions_with_one_idempotency_key_make_one_call(
    stack: Stack, round_: int, capsys: pytest.CaptureFixture[str]
) -> None:
    key = f"race-{uuid.uuid4().hex}"
    body = {"tool": "echo", "args": {"round": round_}, "idempotency_key": key}

    responses = race(stack, [body] * RACERS)

    assert [r.status_code for r in responses] == [200] * RACERS, [r.text for r in responses]
    call_ids = {r.json()["call_id"] for r in responses}
    stored = calls_with_key(stack, key)
    backend = "postgresql" if "postgresql" in stack.settings.resolved_database_url else "sqlite"
    with capsys.disabled():
        print(
            f"\n[{backend}] {RACERS} racing"
            f" submissions, one key: calls={len(stored)} distinct_answers={len(call_ids)}"
        )
    assert len(stored) == 1
    assert call_ids == set(stored)


def test_racing_submissions_of_one_key_with_different_arguments_make_one_call(
    stack: Stack,
) -> None:
    key = f"race-{uuid.uuid4().hex}"
    bodies = [
        {"tool": "echo", "args": {"variant": i % 2}, "idempotency_key": key} for i in range(RACERS)
    ]

    responses = race(stack, bodies)

    stored = calls_with_key(stack, key)
    assert len(stored) == 1
    winners = [(b, r) for b, r in zip(bodies, responses, strict=True) if r.status_code == 200]
    losers = [(b, r) for b, r in zip(bodies, responses, strict=True) if r.status_code != 200]
    # Those who sent the winning arguments share the one call; the others are told 409.
    assert {r.json()["call_id"] for _, r in winners} == set(stored)
    assert len({b["args"]["variant"] for b, _ in winners}) == 1
    assert len(winners) == RACERS // 2
    for _, response in losers:
        assert response.status_code == 409
        assert response.json() == {
            "ok": False,
            "error": "idempotency key reused with different arguments",
        }
