"""Claims and outcomes of several calls sent together (a shared message's commit): each
gets its own answer, in order, on each backend (on PostgreSQL, through the pipeline)."""

from __future__ import annotations

import json
from typing import cast

import pytest
from sqlalchemy import exc

from router.db.rows import AttemptOutcome, Fence
from router.runtime import Runtime
from router.status import CallStatus

from ..support.calls import queue_call

LEASE_MS = 60_000


def status_of(runtime: Runtime, call_id: str) -> tuple[str, int, str | None]:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row.status, row.attempt, row.value


def test_claims_sent_together_each_get_their_own_answer_in_order(runtime: Runtime) -> None:
    ids = [queue_call(runtime, "echo", {"n": n}) for n in range(5)]
    with runtime.store.transaction() as conn:
        assert runtime.store.claim(conn, ids[2], now=runtime.clock(), lease_ms=LEASE_MS)
    unknown = "call_" + "0" * 32

    with runtime.store.transaction() as conn:
        rows = runtime.store.claim_many(
            conn, [*ids, unknown], now=runtime.clock(), lease_ms=LEASE_MS
        )

    # The third was someone else's already; the last is no call at all.
    assert [row.id if row else None for row in rows] == [ids[0], ids[1], None, ids[3], ids[4], None]
    assert all(row.status == CallStatus.RUNNING and row.attempt == 1 for row in rows if row)
    assert [status_of(runtime, call_id)[:2] for call_id in ids] == [(CallStatus.RUNNING, 1)] * 5


def test_outcomes_sent_together_are_each_fenced_on_their_own_attempt(runtime: Runtime) -> None:
    ids = [queue_call(runtime, "echo", {"n": n}) for n in range(4)]
    with runtime.store.transaction() as conn:
        rows = runtime.store.claim_many(conn, ids, now=runtime.clock(), lease_ms=LEASE_MS)
    claimed_at = {row.id: row.started_at for row in rows if row is not None}
    assert len(claimed_at) == len(ids)
    outcomes = [
        AttemptOutcome(
            call_id=call_id,
            # The second names a claim that no longer holds its call.
            fence=Fence(2 if n == 1 else 1, claimed_at[call_id]),
            status=CallStatus.SUCCEEDED,
            at=runtime.clock(),
            value=json.dumps(n),
        )
        for n, call_id in enumerate(ids)
    ]

    with runtime.store.transaction() as conn:
        written = runtime.store.finish(conn, outcomes)
    with runtime.store.transaction() as conn:
        again = runtime.store.finish(conn, outcomes[:1])

    assert written == [True, False, True, True]
    assert again == [False]  # finished already: nothing is recorded twice
    assert [status_of(runtime, call_id) for call_id in ids] == [
        (CallStatus.SUCCEEDED, 1, "0"),
        (CallStatus.RUNNING, 1, None),
        (CallStatus.SUCCEEDED, 1, "2"),
        (CallStatus.SUCCEEDED, 1, "3"),
    ]


# SQLite runs them one at a time, and does not refuse an over-long text.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_an_error_amid_outcomes_sent_together_records_none_of_them(runtime: Runtime) -> None:
    ids = [queue_call(runtime, "echo", {"n": n}) for n in range(3)]
    with runtime.store.transaction() as conn:
        assert all(runtime.store.claim_many(conn, ids, now=runtime.clock(), lease_ms=LEASE_MS))
    outcomes = [
        AttemptOutcome(
            call_id=call_id,
            fence=Fence(1, runtime.clock()),
            # The second's status is too long for its column: the server refuses it.
            status=cast(CallStatus, "x" * 40) if n == 1 else CallStatus.SUCCEEDED,
            at=runtime.clock(),
            value=json.dumps(n),
        )
        for n, call_id in enumerate(ids)
    ]

    with pytest.raises(exc.DataError), runtime.store.transaction() as conn:
        runtime.store.finish(conn, outcomes)

    assert [status_of(runtime, call_id)[0] for call_id in ids] == [CallStatus.RUNNING] * 3
    with runtime.store.transaction() as conn:  # the pool's connections still serve
        assert runtime.store.finish(conn, [outcomes[0], outcomes[2]]) == [True, True]
    assert [status_of(runtime, call_id)[0] for call_id in ids] == [
        CallStatus.SUCCEEDED,
        CallStatus.RUNNING,
        CallStatus.SUCCEEDED,
    ]
