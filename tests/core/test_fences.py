"""A run's changes land only while its claim still holds the call (``rows.Fence``): the
attempt number and the claim's time, so that a run whose claim a database crash undid
cannot touch the claim made again under the same attempt. Each backend, real database."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from sqlalchemy.engine import Connection

from router.db.rows import AttemptOutcome, CallRow, Fence
from router.db.store import Store
from router.runtime import Runtime
from router.status import CallStatus

from ..support.calls import queue_call

LEASE_MS = 60_000
CLAIMED_AT = 1_000_000


def claimed(runtime: Runtime) -> CallRow:
    call_id = queue_call(runtime, "echo", {"n": 1})
    with runtime.store.transaction() as conn:
        row = runtime.store.claim(conn, call_id, now=CLAIMED_AT, lease_ms=LEASE_MS)
    assert row is not None and row.fence == Fence(1, CLAIMED_AT)
    return row


def stored(runtime: Runtime, call_id: str) -> CallRow:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row


def finish(store: Store, conn: Connection, call_id: str, fence: Fence) -> bool:
    outcome = AttemptOutcome(call_id, fence, CallStatus.SUCCEEDED, CLAIMED_AT + 1, value="1")
    return store.finish(conn, [outcome]) == [True]


CHANGES: dict[str, Callable[[Store, Connection, str, Fence], bool]] = {
    "finish": finish,
    "retry_later": lambda store, conn, call_id, fence: store.retry_later(
        conn, call_id, fence=fence, now=CLAIMED_AT + 1, due_at=CLAIMED_AT + 2
    ),
    "requeue_lost": lambda store, conn, call_id, fence: store.requeue_lost(
        conn, call_id, fence=fence, now=CLAIMED_AT + 1
    ),
    "renew_lease": lambda store, conn, call_id, fence: store.renew_lease(
        conn, call_id, fence=fence, lease_until=CLAIMED_AT + 2 * LEASE_MS
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_runs_change_lands_only_under_its_own_claim(runtime: Runtime, change: str) -> None:
    row = claimed(runtime)
    apply = CHANGES[change]
    others = [
        Fence(2, CLAIMED_AT),  # a later attempt's
        Fence(1, CLAIMED_AT - 1),  # the same attempt, claimed again after a crash undid it
        Fence(1, None),
    ]
    for other in others:
        with runtime.store.transaction() as conn:
            assert not apply(runtime.store, conn, row.id, other), other
        assert stored(runtime, row.id) == row
    with runtime.store.transaction() as conn:
        assert apply(runtime.store, conn, row.id, row.fence)
    assert stored(runtime, row.id) != row


def test_only_a_call_never_claimed_fails_as_unclaimed(runtime: Runtime) -> None:
    never = queue_call(runtime, "echo", {"n": 2})
    retried = claimed(runtime)
    with runtime.store.transaction() as conn:
        assert runtime.store.retry_later(
            conn, retried.id, fence=retried.fence, now=CLAIMED_AT + 1, due_at=CLAIMED_AT + 2
        )
        # Queued again, but claimed once: not a call whose message never went out.
        assert not runtime.store.fail_unclaimed(conn, retried.id, now=CLAIMED_AT + 3, error="x")
        assert runtime.store.fail_unclaimed(conn, never, now=CLAIMED_AT + 3, error="unavailable")
    assert stored(runtime, retried.id).status == CallStatus.QUEUED
    failed = stored(runtime, never)
    assert (failed.status, failed.error, json.loads(failed.args)) == (
        CallStatus.FAILED,
        "unavailable",
        {"n": 2},
    )
