"""A few database connections kept checked out between write transactions.

Checking a connection out of SQLAlchemy's pool and back in for every transaction, with
the ``Connection`` built around it and the pool's events, costs more CPU than the
database spends on a short write transaction, and a lone call makes three of them. So up
to ``KEEP`` connections stay checked out between write transactions, each used by one
transaction at a time; past that many at once (a burst of threads), a connection comes
from the pool and goes back as usual.

On PostgreSQL a kept connection begins each transaction as the pool's checkout does
(``engine.begin_as_the_ping``): that ``BEGIN`` is also the check that the server still
has it, and one it dropped is discarded for a fresh connection from the pool before
anything of the transaction runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

from .engine import begin_as_the_ping

# Idle connections kept at most: well under the pool's own size, which readers share.
KEEP = 4


class KeptConnections:
    def __init__(self, engine: Engine, keep: int = KEEP) -> None:
        self.engine, self.keep = engine, keep
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        # Disposing of the engine closes its pool's connections; these are checked out.
        event.listen(engine, "engine_disposed", lambda _engine: self.close())

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection with no transaction, this caller's alone until it is done."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None and self.engine.dialect.name == "postgresql":
            driver = conn.connection.dbapi_connection
            if driver is None or not begin_as_the_ping(driver)[0]:
                conn.invalidate()  # gone: the pool's next connection is checked out anew
                conn.close()
                conn = None
        if conn is None or conn.closed or conn.invalidated:
            conn = self.engine.connect()
        try:
            yield conn
        finally:
            self._put_back(conn)

    def close(self) -> None:
        """Close the idle connections for good (not handed back to a pool the engine may
        have disposed of), and from now on keep none: those in use go back to the pool
        when their caller is done."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            _close_for_good(conn)

    def _put_back(self, conn: Connection) -> None:
        usable = not (conn.closed or conn.invalidated or conn.in_transaction())
        with self._lock:
            if usable and not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()


def _close_for_good(conn: Connection) -> None:
    if not conn.closed and not conn.invalidated:
        conn.detach()  # closing a detached connection closes the driver's connection
    conn.close()
