"""Completion notifications (the message format, the listener's hand-over to waiters) and
SQLite's write-lock poll: the pieces of the fast path that need no running stack.

End to end (a worker's notification answering a waiting ``POST /v1/calls``) is covered by
every waiting call in the suite; these pin the pieces that make it safe.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from router.db import engine as engine_module
from router.db.engine import begin_immediate, make_engine
from router.db.store import Store
from router.errors import StoreUnavailable
from router.messaging.completions import (
    MAX_RESULT_BYTES,
    CompletionListener,
    Notifier,
    completion_call_id,
    completion_message,
    parse_completion,
)
from router.messaging.namespace import Namespace
from router.results import CallResult
from router.trust.keyring import KeyRing

from ..support import services

DONE = CallResult(
    status="succeeded", tool="echo", call_id="call_1", value={"a": [1, "é"]}, answered_by="b"
)


DONE2 = CallResult(status="failed", tool="echo", call_id="call_2", error="no", error_type="E")
KEYRING = KeyRing(b"k" * 32)
OTHER_KEYRING = KeyRing(b"x" * 32)
NAMESPACE = Namespace("tr-test")


def message(call_id: str, result: CallResult | None, keyring: KeyRing = KEYRING) -> bytes:
    return completion_message(call_id, result, keyring).encode()


def test_a_result_survives_the_message_unchanged() -> None:
    parsed = parse_completion(message("call_1", DONE), KEYRING)
    assert parsed == ("call_1", DONE)


def test_a_result_without_a_valid_tag_is_only_a_wake_up() -> None:
    """Redis is not trusted: a result it carries counts only if a worker of this deployment
    tagged it. Forged, re-tagged by another deployment, edited or untagged, it is dropped
    and the waiter reads the database."""
    forged = CallResult(status="succeeded", tool="wire", call_id="call_1", value="paid")
    assert parse_completion(message("call_1", forged, OTHER_KEYRING), KEYRING) == ("call_1", None)
    edited = message("call_1", DONE).replace(b'"echo"', b'"wire"')
    assert parse_completion(edited, KEYRING) == ("call_1", None)
    untagged = message("call_1", DONE).rpartition(b"|")[0]
    assert parse_completion(untagged, KEYRING) == ("call_1", None)


def test_a_large_result_is_left_to_the_database() -> None:
    big = CallResult(status="succeeded", tool="echo", call_id="c", value="x" * MAX_RESULT_BYTES)
    assert completion_message("c", big, KEYRING) == "c"
    assert parse_completion(b"c", KEYRING) == ("c", None)


def test_malformed_messages_are_ignored() -> None:
    assert parse_completion(b"{not json", KEYRING) is None
    assert parse_completion(b'{"call_id": "c"}', KEYRING) is None
    assert parse_completion(b'{"call_id": 5, "result": {}}', KEYRING) is None
    assert parse_completion(b'{"a":' + b"[" * 100_000, KEYRING) is None


def test_the_call_id_is_read_without_parsing_the_result() -> None:
    tagged = message("call_1", DONE)
    assert completion_call_id(tagged, KEYRING) == "call_1"
    assert completion_call_id(b"call_2", KEYRING) == "call_2"  # a result too large to ride
    # Written some other way (spaces, another key order): the whole message is parsed.
    body = json.loads(tagged.rpartition(b"|")[0])
    spaced = json.dumps({"result": body["result"], "call_id": "call_3"})
    assert completion_call_id(spaced.encode(), KEYRING) == "call_3"
    assert completion_call_id(b"{not json", KEYRING) is None


def test_a_completion_nobody_waits_for_is_parsed_only_when_a_waiter_comes() -> None:
    async def scenario() -> None:
        listener = CompletionListener("redis://unused", NAMESPACE, KEYRING)
        listener.hear(message("call_1", DONE))
        assert listener._recent["call_1"].message is not None  # kept as it came
        with listener.waiting_for("call_1") as late:
            assert late.event.is_set() and late.result == DONE
        with listener.waiting_for("call_2") as early:
            listener.hear(message("call_2", DONE2))
            assert early.event.is_set() and early.result == DONE2
        listener.hear(b"{not json")
        assert set(listener._recent) == {"call_1", "call_2"}

    asyncio.run(scenario())


def test_a_waiter_registered_after_the_completion_gets_it_at_once() -> None:
    async def scenario() -> None:
        listener = CompletionListener("redis://unused", NAMESPACE, KEYRING)
        listener.hear(message("call_1", DONE))
        with listener.waiting_for("call_1") as waiter:
            assert waiter.event.is_set() and waiter.result == DONE
        with listener.waiting_for("call_2") as other:
            assert not other.event.is_set()
            listener.hear(message("call_2", None))
            assert other.event.is_set() and other.result is None
        assert not listener._waiters

    asyncio.run(scenario())


def test_the_listener_tells_group_commit_of_each_completion_it_hears(redis_base: str) -> None:
    """Over real Redis: a worker's notification reaches ``on_completion`` (which is how an
    API process learns that its calls in flight finished, ``router.dispatch.in_flight``)."""
    redis_url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    heard: list[str] = []

    async def scenario() -> None:
        listener = CompletionListener(redis_url, NAMESPACE, KEYRING, on_completion=heard.append)
        listener.start()
        notifier = Notifier(redis_url, NAMESPACE, KEYRING)
        try:
            deadline = time.monotonic() + 30
            # Published until heard: the subscription starts a moment after start().
            while not heard and time.monotonic() < deadline:
                await asyncio.to_thread(notifier.call_done, "call_1", DONE)
                await asyncio.sleep(0.05)
        finally:
            notifier.client.close()
            await listener.stop()

    asyncio.run(scenario())
    assert heard and set(heard) == {"call_1"}


def test_sqlite_writers_wait_for_the_write_lock_and_time_out(tmp_path: Path) -> None:
    """``begin_immediate`` polls for the lock: it gets it once released, and gives up at
    its timeout with SQLite's own error."""
    path = tmp_path / "lock.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        begin_immediate(waiter, timeout_s=0.05)
    assert waiter.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    threading.Timer(0.1, lambda: holder.execute("COMMIT")).start()
    started = time.monotonic()
    begin_immediate(waiter, timeout_s=10)
    assert time.monotonic() - started >= 0.05
    waiter.execute("INSERT INTO t VALUES (1)")
    waiter.execute("COMMIT")
    assert holder.execute("SELECT count(*) FROM t").fetchone()[0] == 1


def test_a_write_lock_never_granted_is_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the busy timeout a writer gets ``StoreUnavailable`` (a 503), never the driver's
    raw error (a 500)."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 100)
    path = tmp_path / "busy.db"
    store = Store(make_engine(f"sqlite:///{path}"))
    with store.transaction() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"), store.transaction() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    finally:
        holder.execute("ROLLBACK")
        store.engine.dispose()
