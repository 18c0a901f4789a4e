"""How the API's processes on one port split one pool of PostgreSQL connections: together
no more than one process's, and each enough for its kept connections and its readers."""

from __future__ import annotations

from sqlalchemy.pool import QueuePool

from router.db.engine import MAX_OVERFLOW, POOL_SIZE, PROCESS_MIN_CONNECTIONS, make_engine
from router.db.kept import KEEP

URL = "postgresql+psycopg://nobody@127.0.0.1:1/none"  # never connected to


def most_connections(share: int) -> int:
    engine = make_engine(URL, share=share)
    try:
        pool = engine.pool
        assert isinstance(pool, QueuePool)
        return pool.size() + pool._max_overflow
    finally:
        engine.dispose()


def test_each_process_keeps_room_for_readers_beside_its_kept_connections() -> None:
    assert PROCESS_MIN_CONNECTIONS >= 2 * KEEP
    for share in range(1, 17):
        assert most_connections(share) >= PROCESS_MIN_CONNECTIONS, share


def test_a_few_processes_together_open_no_more_than_one() -> None:
    alone = most_connections(1)
    assert alone == POOL_SIZE + MAX_OVERFLOW
    for share in (2, 3):
        assert most_connections(share) * share <= alone
