"""SQLite's WAL checkpoints run by the API's thread, not by commits (``db.wal_checkpoints``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from router.api.app import create_app
from router.db.engine import make_engine
from router.db.wal_checkpoints import AUTOCHECKPOINT_PAGES, WalCheckpointer
from router.runtime import Runtime

from ..support.waiting import wait_for


def write_rows(engine: Engine, count: int) -> None:
    for n in range(count):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": "x" * 2000 + str(n)})


def all_copied(checkpointer: WalCheckpointer, at_least: int) -> bool:
    last = checkpointer.last
    return last is not None and last[1] >= at_least and last[2] == last[1]


def test_commits_leave_checkpoints_to_the_thread_which_copies_the_log(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
        assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == AUTOCHECKPOINT_PAGES
    checkpointer = WalCheckpointer.for_engine(engine)
    assert checkpointer is not None
    checkpointer.interval_s = 0.02
    write_rows(engine, 50)  # well under the engine's threshold: no commit checkpointed

    checkpointer.start()
    try:
        wait_for(lambda: all_copied(checkpointer, at_least=50), 10, "the log to be copied")
    finally:
        checkpointer.stop()
    assert not checkpointer.running
    with closing(sqlite3.connect(tmp_path / "db.sqlite")) as raw:
        assert raw.execute("SELECT count(*) FROM t").fetchone() == (50,)
    engine.dispose()


def test_of_several_processes_one_checkpoints_and_another_takes_over(tmp_path: Path) -> None:
    """Two checkpointers stand for two API processes: flock locks belong to an open file,
    so two opens of the lock file compete as two processes would."""
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
    first, second = WalCheckpointer.for_engine(engine), WalCheckpointer.for_engine(engine)
    assert first is not None and second is not None
    first.interval_s = second.interval_s = 0.02
    first.start()
    try:
        wait_for(lambda: first.holds_lock, 10, "the first to take the lock")
        second.start()
        write_rows(engine, 20)
        wait_for(lambda: all_copied(first, at_least=20), 10, "the holder to copy the log")
        assert not second.holds_lock and second.last is None
        first.stop()
        assert not first.holds_lock
        write_rows(engine, 20)
        wait_for(lambda: all_copied(second, at_least=20), 10, "the other to take over")
        assert second.holds_lock
    finally:
        first.stop()
        second.stop()
    engine.dispose()


def test_only_an_sqlite_file_gets_a_checkpointer(tmp_path: Path) -> None:
    assert WalCheckpointer.for_engine(make_engine("sqlite:///:memory:")) is None
    assert WalCheckpointer.for_engine(make_engine("postgresql://nobody@127.0.0.1/x")) is None
    found = WalCheckpointer.for_engine(make_engine(f"sqlite:///{tmp_path / 'a.db'}"))
    assert found is not None and found.database_path == str(tmp_path / "a.db")


def test_the_api_runs_the_checkpoints_while_it_is_up(runtime: Runtime) -> None:
    app = create_app(runtime)
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        checkpointer = app.state.checkpointer
        if runtime.engine.dialect.name == "sqlite":
            assert checkpointer is not None and checkpointer.running
        else:
            assert checkpointer is None
    assert checkpointer is None or not checkpointer.running
