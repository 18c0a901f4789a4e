"""A few SQLite connections kept checked out between write transactions.

Checking a connection out of SQLAlchemy's pool and back in for every transaction, with
the ``Connection`` built around it and the pool's events, costs more CPU than SQLite
spends on a short write transaction, and a lone call makes three of them. So up to
``KEEP`` connections stay checked out between write transactions, each used by one
transaction at a time; past that many at once (a burst of threads), a connection comes
from the pool and goes back as usual. Only for SQLite: a PostgreSQL transaction's
checkout is where a connection the server dropped is found and replaced, and where its
``BEGIN`` is chosen (``router.db.engine``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

# Idle connections kept at most: well under the pool's own size, which readers share.
KEEP = 4


class KeptConnections:
    def __init__(self, engine: Engine, keep: int = KEEP) -> None:
        self.engine, self.keep = engine, keep
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection with no transaction, this caller's alone until it is done."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed or conn.invalidated:
            conn = self.engine.connect()
        try:
            yield conn
        finally:
            self._put_back(conn)

    def close(self) -> None:
        """Close the idle connections; those in use are closed when their caller is done."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()

    def _put_back(self, conn: Connection) -> None:
        usable = not (conn.closed or conn.invalidated or conn.in_transaction())
        with self._lock:
            if usable and not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()
