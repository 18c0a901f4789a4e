"""``router.db.kept``: SQLite write transactions reuse a few connections kept checked out,
each used by one transaction at a time, and never hold more than the pool can spare.
Real SQLite files, real threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from router.db.engine import make_engine
from router.db.kept import KEEP
from router.db.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'kept.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (n INTEGER)"))
    store = Store(engine)
    yield store
    store.close()
    engine.dispose()


def rows(store: Store) -> list[int]:
    with store.reading() as conn:
        return list(conn.execute(text("SELECT n FROM t ORDER BY n")).scalars())


def test_one_transaction_after_another_checks_out_one_connection_once(store: Store) -> None:
    checkouts: list[object] = []
    event.listen(store.engine, "checkout", lambda *args: checkouts.append(args[0]))
    for n in range(3):
        with store.transaction() as conn:
            conn.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
    assert len(checkouts) == 1
    assert rows(store) == [0, 1, 2]


def test_a_rolled_back_transaction_writes_nothing_and_its_connection_serves_the_next(
    store: Store,
) -> None:
    with pytest.raises(RuntimeError), store.transaction() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        raise RuntimeError("rolled back")
    with store.transaction() as conn:
        conn.execute(text("INSERT INTO t VALUES (2)"))
    assert rows(store) == [2]


def test_many_threads_at_once_all_commit_and_only_a_few_connections_stay_out(
    store: Store,
) -> None:
    threads, per_thread = 24, 20
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work(first: int) -> None:
        start.wait()
        try:
            for n in range(first, first + per_thread):
                with store.transaction() as conn:
                    conn.execute(text("INSERT INTO t VALUES (:n)"), {"n": n})
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)

    workers = [threading.Thread(target=work, args=(i * per_thread,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    assert rows(store) == list(range(threads * per_thread))
    # Idle between transactions, at most KEEP connections stay checked out of the pool.
    assert store.engine.pool.checkedout() <= KEEP  # type: ignore[attr-defined]


def test_closed_the_store_keeps_none_and_still_writes(store: Store) -> None:
    with store.transaction() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    assert store.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    store.close()
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    with store.transaction() as conn:
        conn.execute(text("INSERT INTO t VALUES (2)"))
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    assert rows(store) == [1, 2]
