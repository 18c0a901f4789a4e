"""The API's publisher under strain, against a ``redis-server`` of the test's own that it
stops (``SIGSTOP``: connections still open, nothing answers) and lets go on.

- Many threads publishing at once, as keyed submissions do (each from its own thread),
  all wait for a slow Redis: none is refused for want of a connection.
- With Redis not answering, the threads queued behind one connect share its failure
  instead of each timing out against Redis in turn, which held the API's threads (reads
  and readiness checks included) for as many timeouts as there were publishes; with Redis
  slow but answering, they share its channel.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from router.errors import BrokerUnavailable
from router.messaging.celery_app import make_celery
from router.messaging.namespace import Namespace
from router.messaging.publisher import Publisher
from router.messaging.run_message import RunMessage

from ..support.faults import PrivateRedis
from ..support.waiting import wait_for

NAMESPACE = Namespace("strain")
THREADS = 64


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        paused(server, False)
        server.stop()


def paused(server: PrivateRedis, on: bool) -> None:
    if server.process is not None:
        os.kill(server.process.pid, signal.SIGSTOP if on else signal.SIGCONT)


@contextmanager
def stopped(server: PrivateRedis) -> Iterator[None]:
    paused(server, True)
    try:
        yield
    finally:
        paused(server, False)


def message(n: int) -> RunMessage:
    return RunMessage(call_id=f"call_strain_{n}", tool="echo", queue="tools.low", timeout_s=30)


def publish_all(publisher: Publisher, count: int) -> tuple[list[threading.Thread], list[Any]]:
    """``count`` threads, each publishing one message; what each raised, if anything."""
    outcomes: list[Any] = []
    barrier = threading.Barrier(count)

    def one(n: int) -> None:
        barrier.wait(timeout=30)
        try:
            publisher.publish([message(n)])
            outcomes.append(None)
        except Exception as exc:  # counted by the test
            outcomes.append(exc)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    return threads, outcomes


def connections_to(server: PrivateRedis) -> int:
    return sum(
        1
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == server.port and conn.status == "ESTABLISHED"
    )


def test_many_threads_publishing_into_a_slow_redis_all_wait_their_turn(
    private_redis: PrivateRedis,
) -> None:
    app = make_celery(private_redis.url, NAMESPACE)
    # Redis is held still until every publish is in flight, however long a loaded host
    # takes to start them: no publish may give up on it meanwhile.
    app.conf.broker_transport_options["socket_timeout"] = 300.0
    publisher = Publisher(app)
    publisher.publish([message(-1)])  # the channel open, as in a running API
    try:
        with stopped(private_redis):
            threads, outcomes = publish_all(publisher, THREADS)
            # Every publish is in flight on a connection of its own (or one has failed).
            wait_for(
                lambda: any(outcomes) or connections_to(private_redis) >= THREADS,
                60,
                "every publish in flight",
            )
        for thread in threads:
            thread.join(60)
        refused = [exc for exc in outcomes if exc is not None]
        assert refused == [] and len(outcomes) == THREADS, refused[:3]
        queued = redis.Redis.from_url(private_redis.url).llen(NAMESPACE.key("tools.low"))
        assert queued == THREADS + 1
    finally:
        publisher.close()


def test_publishes_behind_a_connect_that_gets_no_answer_share_its_failure(
    private_redis: PrivateRedis,
) -> None:
    publisher = Publisher(make_celery(private_redis.url, NAMESPACE))
    connects: list[int] = []
    connection_for_write = publisher.app.connection_for_write

    def counted(*args: Any, **kwargs: Any) -> Any:
        connects.append(1)
        return connection_for_write(*args, **kwargs)

    publisher.app.connection_for_write = counted  # type: ignore[method-assign]
    try:
        with stopped(private_redis):
            threads, outcomes = publish_all(publisher, 16)
            for thread in threads:
                thread.join(120)
            assert len(outcomes) == 16
            assert all(isinstance(exc, BrokerUnavailable) for exc in outcomes), outcomes
            # One connect tried, not one per publish, each waiting out Redis's silence in
            # turn (a second only for a thread that came after the first had failed).
            assert len(connects) <= 2, len(connects)
        # Redis answering again: the next publish connects and goes out.
        wait_for(lambda: _published(publisher), 30, "a publish once Redis answers")
    finally:
        publisher.close()


def _published(publisher: Publisher) -> bool:
    try:
        publisher.publish([message(0)])
    except BrokerUnavailable:
        return False
    return True


def test_publishes_behind_a_slow_connect_wait_for_it_and_go_out(
    private_redis: PrivateRedis,
) -> None:
    """Redis slow but answering (held still a few seconds, within its timeout) while no
    channel is open, as after a restart: every publish waits for the one connect."""
    app = make_celery(private_redis.url, NAMESPACE)
    app.conf.broker_transport_options["socket_timeout"] = 300.0
    publisher = Publisher(app)
    try:
        with stopped(private_redis):
            threads, outcomes = publish_all(publisher, 16)
            wait_for(lambda: connections_to(private_redis) >= 1, 60, "the connect under way")
            # The slowness itself: longer than a publish used to wait for another's connect.
            threading.Event().wait(3)
        for thread in threads:
            thread.join(60)
        assert outcomes == [None] * 16, outcomes
    finally:
        publisher.close()
