"""Commits that need not wait for the disk, for writes whose loss in a crash harms nothing.

On PostgreSQL a transaction can commit without waiting for the server to flush its log
(``synchronous_commit`` off for that transaction alone). A database crash right after
may undo it, but nothing else: the log is written in order, so the next durable commit
by anyone flushes it too, and a standby receives it in that order. SQLite is unchanged:
its commits in WAL mode with ``synchronous=NORMAL`` never wait for the disk here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy.engine import Connection

# Set while such a transaction checks its connection out (``engine``'s checkout hook
# begins every PostgreSQL transaction).
_COMMIT_EARLY: ContextVar[bool] = ContextVar("toolrouter_commit_early", default=False)
# One round trip for both statements.
_BEGIN_COMMITTING_EARLY = b"BEGIN; SET LOCAL synchronous_commit TO off"


@contextmanager
def commit_early() -> Iterator[None]:
    """Transactions begun inside commit without waiting for the disk (PostgreSQL). Only
    around a transaction's begin: one begun within its body would commit early too."""
    token = _COMMIT_EARLY.set(True)
    try:
        yield
    finally:
        _COMMIT_EARLY.reset(token)


def begin_statement() -> bytes:
    """What the checkout hook sends to begin a transaction here."""
    return _BEGIN_COMMITTING_EARLY if _COMMIT_EARLY.get() else b"BEGIN"


def commit_durably(conn: Connection) -> None:
    """Make a transaction begun under ``commit_early`` wait for the disk after all, as the
    server is configured to (``on``, ``remote_apply`` …)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO DEFAULT")


def flush_earlier_commits(conn: Connection) -> None:
    """Give ``conn``'s transaction an id of its own, so that its commit is written to the
    log and waits until the log is on disk up to it: every commit before it with it."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT pg_current_xact_id()")
