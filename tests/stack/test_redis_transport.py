"""The broker connection every process uses (``messaging.redis_transport``, ``messaging.broker``),
on the session stack's real Redis and worker."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from router.clock import wall_clock_ms
from router.messaging.celery_app import make_celery
from router.messaging.namespace import Namespace
from router.messaging.redis_transport import Channel
from router.runtime import Runtime
from router.settings import Settings
from workers.celeryconfig import worker_settings
from workers.execution import Executor

from ..support.faults import PrivateStack, private_stack_in, start_worker, status
from ..support.launcher import stop_group
from ..support.stack import Stack
from ..support.waiting import wait_for


def test_a_channel_serves_every_use_with_one_client_on_its_own_pool(stack: Stack) -> None:
    app = make_celery(stack.settings.redis_url, Namespace.of(stack.settings))
    try:
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            assert isinstance(channel, Channel)
            with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
                assert first is second
                assert first.connection_pool is channel.pool
                assert first.ping()
            given = redis.Redis(connection_pool=channel.pool)
            with channel.conn_or_acquire(given) as used:
                assert used is given
    finally:
        app.close()


def test_a_channel_whose_pool_was_rebuilt_gets_a_client_on_the_new_one(stack: Stack) -> None:
    app = make_celery(stack.settings.redis_url, Namespace.of(stack.settings))
    try:
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            with channel.conn_or_acquire() as before:
                assert before.ping()
            channel._disconnect_pools()  # what kombu does when the connection drops
            with channel.conn_or_acquire() as after:
                assert after is not before
                assert after.connection_pool is channel.pool
                assert after.ping()
    finally:
        app.close()


def test_redis_keeps_no_copy_of_a_message_a_worker_took(stack: Stack, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    client = redis.Redis.from_url(stack.settings.redis_url)
    with stack.client() as http:
        call_id = http.post(
            "/v1/calls", json={"tool": "ledger", "args": {"path": str(ledger), "sleep": 1}}
        ).json()["call_id"]
        try:
            wait_for(
                lambda: http.get(f"/v1/calls/{call_id}").json()["status"] == "running",
                30,
                "the call to start",
            )
            # Running, so its message was taken and not yet acked: kombu's ack emulation
            # would hold a copy of it here until the ack.
            assert client.hlen("unacked") == 0
            assert client.zcard("unacked_index") == 0
        finally:
            client.close()
        done = http.get(f"/v1/calls/{call_id}", params={"wait_s": 30}).json()
    assert done["status"] == "succeeded", done


def test_the_prefetch_setting_is_what_the_worker_takes_ahead() -> None:
    url = "redis://127.0.0.1:1/0"
    assert worker_settings(Settings(), url, Namespace("tr-test"))["worker_prefetch_multiplier"] == 2
    assert (
        worker_settings(Settings(worker_prefetch=1), url, Namespace("tr-test"))[
            "worker_prefetch_multiplier"
        ]
        == 1
    )


@pytest.fixture
def private_stack(tmp_path: Path) -> Iterator[PrivateStack]:
    with private_stack_in(tmp_path) as private:
        yield private


def test_a_warm_shutdown_gives_back_the_message_it_had_not_started(
    private_stack: PrivateStack,
) -> None:
    """One pool process, two slow calls: the first runs, the second waits in the worker.
    SIGTERM lets the first finish and puts the second back in Redis, with no ack copy to
    do it from."""
    runtime, ledger = private_stack.runtime, private_stack.dir / "ledger.txt"
    worker = start_worker(private_stack.env, private_stack.dir / "worker.log")
    client = redis.Redis.from_url(private_stack.redis.url)
    try:
        first, second = (private_stack.submit_ledger(ledger, n, sleep=2) for n in (1, 2))
        wait_for(lambda: status(runtime, first) == "running", 30, "the first to run")
        # Both messages are out of the queue: one running, one taken ahead.
        wait_for(
            lambda: client.llen(runtime.namespace.prefix + "tools.low") == 0,
            10,
            "the second to be taken",
        )
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        assert status(runtime, first) == "succeeded"
        assert status(runtime, second) == "queued"
        waiting = client.lrange(runtime.namespace.prefix + "tools.low", 0, -1)
        assert sum(second.encode() in raw for raw in waiting) == 1
    finally:
        stop_group(worker)
        client.close()


def test_a_sigkilled_worker_loses_no_call_it_had_taken_ahead(
    private_stack: PrivateStack,
) -> None:
    """SIGKILL the whole worker (main process and pool) while one call runs and one waits
    in it: Redis keeps no copy of either message, so the database is what heals them. The
    reconciler publishes the queued call again and it runs once; the reaper interrupts the
    running one (not idempotent, so it is never run twice)."""
    runtime, ledger = private_stack.runtime, private_stack.dir / "ledger.txt"
    worker = start_worker(private_stack.env, private_stack.dir / "worker.log")
    client = redis.Redis.from_url(private_stack.redis.url)
    replacement = None
    try:
        running = private_stack.submit_ledger(ledger, 1, sleep=30)
        ahead = private_stack.submit_ledger(ledger, 2)
        wait_for(lambda: status(runtime, running) == "running", 30, "the first to run")
        wait_for(
            lambda: client.llen(runtime.namespace.prefix + "tools.low") == 0,
            10,
            "the second to be taken",
        )
        stop_group(worker, signal.SIGKILL)
        assert status(runtime, ahead) == "queued"
        # Nothing in Redis names either call: no queue entry, no unacked copy.
        leftovers = [
            key
            for key in client.keys("*")
            if client.type(key) in (b"list", b"hash", b"zset")
            and any(
                call_id.encode() in raw
                for raw in _values(client, key)
                for call_id in (running, ahead)
            )
        ]
        assert leftovers == []

        replacement = start_worker(private_stack.env, private_stack.dir / "worker2.log")
        # The recovery tasks as beat would run them, a minute later: past the reconciler's
        # requeue_after_s and past the running call's lease.
        later = Runtime(runtime.settings, clock=lambda: wall_clock_ms() + 60_000)
        notifier = later.notifier()
        try:
            executor = Executor(later, notifier, actor="test-recovery")
            assert executor.reconcile() == 1
            assert executor.reap() == {"interrupted": 1}
        finally:
            notifier.client.close()
            later.close()
        wait_for(lambda: status(runtime, ahead) == "succeeded", 30, "the call taken ahead to run")
        assert status(runtime, running) == "interrupted"
        runs = [line.split()[0] for line in ledger.read_text().splitlines()]
        assert sorted(runs) == sorted([running, ahead])
    finally:
        stop_group(worker)
        if replacement is not None:
            stop_group(replacement)
        client.close()


def _values(client: redis.Redis, key: bytes) -> list[bytes]:
    kind = client.type(key)
    if kind == b"list":
        return list(client.lrange(key, 0, -1))
    if kind == b"hash":
        return list(client.hvals(key))
    return list(client.zrange(key, 0, -1))
