"""SQLite's WAL checkpoints, run by a thread of the API process instead of by commits.

In WAL mode SQLite copies the log back into the database file (a checkpoint) when a
commit finds the log longer than ``wal_autocheckpoint`` pages (1,000 by default), and
that commit's caller waits for the copy and an fsync of the database file: every so
often a waited call pays for a whole checkpoint, and that sets SQLite's p99 latency.
Here a thread runs a PASSIVE checkpoint (it waits for no reader or writer) every
``INTERVAL_S``; commits then find the log already copied.
The engine's own threshold is raised to ``AUTOCHECKPOINT_PAGES``, where it only bounds
the log of a process without this thread (a worker alone, the CLI), or if this thread
falls behind. PostgreSQL needs none of it.

With several API processes on one database, one of them checkpoints: the one holding an
exclusive ``flock`` on ``<database>-checkpoints.lock``. The others try for the lock every
interval, so one takes over when its holder exits (the kernel drops a dead process's lock).
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading

from sqlalchemy import Engine

log = logging.getLogger(__name__)

INTERVAL_S = 0.5
# 64 MiB of log at SQLite's 4 KiB pages.
AUTOCHECKPOINT_PAGES = 16_000


class WalCheckpointer:
    """Checkpoints one SQLite database's log every ``interval_s`` until stopped."""

    def __init__(self, database_path: str, interval_s: float = INTERVAL_S) -> None:
        self.database_path, self.interval_s = database_path, interval_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # What this thread's last checkpoint found (``checkpoint``), once it has run.
        self.last: tuple[int, int, int] | None = None
        # Whether this process holds the lock and so runs the checkpoints.
        self.holds_lock = False

    @classmethod
    def for_engine(cls, engine: Engine) -> WalCheckpointer | None:
        """One for ``engine``'s database if it is an SQLite file; None otherwise."""
        path = engine.url.database
        if engine.dialect.name != "sqlite" or not path or path == ":memory:":
            return None
        return cls(path)

    def checkpoint(self, connection: sqlite3.Connection) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (1 if it was blocked, frames in the log, frames of the
        log now in the database file)."""
        busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(copied)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            lock = os.open(f"{self.database_path}-checkpoints.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            # Commits over the engine's threshold checkpoint instead.
            log.warning("no WAL checkpoints for %s: %s", self.database_path, exc)
            return
        connection = sqlite3.connect(
            self.database_path, timeout=1.0, isolation_level=None, check_same_thread=False
        )
        try:
            while not self._stopping.wait(self.interval_s):
                if not self.holds_lock:
                    self.holds_lock = _try_lock(lock)
                    if not self.holds_lock:
                        continue
                try:
                    self.last = self.checkpoint(connection)
                except sqlite3.Error as exc:
                    # The next commit over the engine's threshold checkpoints instead.
                    log.warning("WAL checkpoint of %s failed: %s", self.database_path, exc)
        finally:
            os.close(lock)  # releases the lock, if held
            self.holds_lock = False
            connection.close()


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
