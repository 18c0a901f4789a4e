"""The broker connection every process uses (``router.redis_transport``, ``router.broker``),
on the session stack's real Redis and worker."""

from __future__ import annotations

from pathlib import Path

import redis

from router.broker import make_celery
from router.redis_transport import Channel

from .faults import wait_for
from .stack import Stack


def test_a_channel_serves_every_use_with_one_client_on_its_own_pool(stack: Stack) -> None:
    app = make_celery(stack.settings.redis_url)
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
    app = make_celery(stack.settings.redis_url)
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
