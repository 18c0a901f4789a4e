"""Requests to one keyed batch at the same moment, on PostgreSQL, where writers do not wait
for each other until they touch the same rows (SQLite takes its write lock at ``BEGIN``):
each index of a batch holds one call, each request gets places of its own, and a request
beaten every time is told to send itself again."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError

from router.db.schema import batches as batches_table
from router.db.schema import calls
from router.dispatch.batch_receipt import Receipt
from router.dispatch.batches import BATCH_BUSY, BatchService
from router.errors import Conflict
from router.runtime import Runtime

ON_POSTGRESQL = pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
# Readiness waits give up after this long; they end as soon as what they wait for holds.
PATIENCE_S = 60.0


def service(runtime: Runtime) -> BatchService:
    return BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock)


def items(*ns: int) -> list[dict[str, Any]]:
    return [{"tool": "echo", "args": {"n": n}} for n in ns]


def calls_by_index(runtime: Runtime, batch_id: str) -> dict[int, int]:
    with runtime.store.reading() as conn:
        rows = conn.execute(
            select(calls.c.batch_index, func.count())
            .where(calls.c.batch_id == batch_id)
            .group_by(calls.c.batch_index)
        ).all()
    return {int(index): int(n) for index, n in rows}


def both(first: Any, second: Any) -> tuple[Receipt, Receipt]:
    with ThreadPoolExecutor(2) as pool:
        one, two = pool.submit(first), pool.submit(second)
        return one.result(timeout=PATIENCE_S), two.result(timeout=PATIENCE_S)


def meet_after_reading_places(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first two readers of a batch's places wait for each other before going on."""
    both_read = threading.Barrier(2, timeout=PATIENCE_S)
    reads, read = itertools.count(), runtime.store.batch_calls_at

    def read_then_meet(*args: Any, **kwargs: Any) -> dict[int, tuple[str, str]]:
        placed = read(*args, **kwargs)
        if next(reads) < 2:
            both_read.wait()
        return placed

    monkeypatch.setattr(runtime.store, "batch_calls_at", read_then_meet)


@ON_POSTGRESQL
def test_two_requests_sending_the_same_indexes_at_once_store_each_call_once(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = service(runtime)
    opened = batches.submit("agent", items(0, 1, 2), key="resent", offset=0)
    # Both requests read indexes 3-5 as empty before either stores its calls there.
    meet_after_reading_places(runtime, monkeypatch)
    again = items(3, 4, 5)
    one, two = both(
        lambda: batches.submit("agent", again, key="resent", offset=3),
        lambda: batches.submit("agent", again, key="resent", offset=3),
    )
    assert calls_by_index(runtime, opened.batch_id) == {i: 1 for i in range(6)}
    assert sorted((r.accepted, r.replayed, len(r.rejected)) for r in (one, two)) == [
        (0, 3, 0),
        (3, 0, 0),
    ]


@ON_POSTGRESQL
def test_two_requests_refusing_the_same_index_at_once_count_it_once(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = service(runtime)
    opened = batches.submit("agent", items(0), key="refused-twice", offset=0)
    # Both requests are inside their transactions before either records the refusal.
    meet_after_reading_places(runtime, monkeypatch)
    again = [*items(1), {"tool": "no_such_tool", "args": {}}]
    one, two = both(
        lambda: batches.submit("agent", again, key="refused-twice", offset=1),
        lambda: batches.submit("agent", again, key="refused-twice", offset=1),
    )
    assert [r.index for r in one.rejected] == [r.index for r in two.rejected] == [1]
    assert calls_by_index(runtime, opened.batch_id) == {0: 1, 1: 1}
    with runtime.store.reading() as conn:
        rejected = conn.execute(
            select(batches_table.c.rejected).where(batches_table.c.id == opened.batch_id)
        ).scalar_one()
    assert rejected == 1


@ON_POSTGRESQL
def test_two_requests_adding_to_a_batch_at_once_get_places_of_their_own(
    runtime: Runtime,
) -> None:
    batches = service(runtime)
    opened = batches.submit("agent", items(0, 1, 2), key="grown", offset=0)
    # The batch's row stays locked until both requests wait for it.
    with runtime.engine.connect() as holder:
        holder.execute(
            text("SELECT submitted FROM batches WHERE id = :id FOR UPDATE"),
            {"id": opened.batch_id},
        )
        with ThreadPoolExecutor(2) as pool:
            try:
                one = pool.submit(batches.submit, "agent", items(10, 11, 12), key="grown")
                two = pool.submit(batches.submit, "agent", items(20, 21, 22), key="grown")
                wait_for_lock_waiters(runtime, 2)
            finally:
                holder.commit()  # never leave the requests waiting on the lock
            receipts = one.result(timeout=PATIENCE_S), two.result(timeout=PATIENCE_S)
    assert [(r.accepted, r.rejected) for r in receipts] == [(3, []), (3, [])]
    assert calls_by_index(runtime, opened.batch_id) == {i: 1 for i in range(9)}


def wait_for_lock_waiters(runtime: Runtime, count: int) -> None:
    """Until ``count`` sessions of this database wait for a lock."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    deadline = time.monotonic() + PATIENCE_S
    while True:
        with runtime.engine.connect() as conn:
            waiting = conn.execute(query).scalar_one()
        if waiting >= count:
            return
        assert time.monotonic() < deadline, f"{waiting} of {count} requests reached the lock"
        time.sleep(0.01)


def test_a_request_that_loses_every_try_is_told_to_send_it_again(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other requests storing the same keys or indexes first, try after try: a 409 the
    agent can act on, not an internal error."""
    batches = service(runtime)

    def always_beaten(*args: Any, **kwargs: Any) -> None:
        raise IntegrityError("INSERT INTO calls …", {}, Exception("duplicate key"))

    monkeypatch.setattr(runtime.dispatcher, "store_new", always_beaten)
    with pytest.raises(Conflict, match=BATCH_BUSY):
        batches.submit("agent", items(0, 1), key="contended", offset=0)


def test_a_batch_that_cannot_be_opened_is_told_to_send_it_again(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every try to open a new batch meets a batch of that id already there: a 409, and
    nothing of the request is stored."""
    batches = service(runtime)
    taken = batches.submit("agent", items(0), key="first").batch_id
    monkeypatch.setattr("router.dispatch.batches.new_batch_id", lambda: taken)
    with pytest.raises(Conflict, match=BATCH_BUSY):
        batches.submit("agent", items(1, 2), key="second")
    with runtime.store.reading() as conn:
        stored = conn.execute(select(calls.c.batch_id, calls.c.batch_index)).all()
        opened = conn.execute(select(batches_table.c.id, batches_table.c.submitted)).all()
    assert stored == [(taken, 0)]
    assert opened == [(taken, 1)]
