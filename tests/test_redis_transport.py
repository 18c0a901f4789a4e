"""The broker connection every process uses (``router.redis_transport``, ``router.broker``),
on the session stack's real Redis and worker."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import redis

from router.broker import make_celery
from router.redis_transport import Channel
from router.runtime import Runtime
from router.settings import Settings
from workers.celeryconfig import worker_settings

from .faults import PrivateRedis, wait_for
from .stack import REPO, TEST_CONFIG, Stack, stack_env, stop_group, wait_for_log, worker_argv


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


def test_the_prefetch_setting_is_what_the_worker_takes_ahead() -> None:
    url = "redis://127.0.0.1:1/0"
    assert worker_settings(Settings(), url)["worker_prefetch_multiplier"] == 2
    assert worker_settings(Settings(worker_prefetch=1), url)["worker_prefetch_multiplier"] == 1


def test_a_warm_shutdown_gives_back_the_message_it_had_not_started(tmp_path: Path) -> None:
    """One pool process, two slow calls: the first runs, the second waits in the worker.
    SIGTERM lets the first finish and puts the second back in Redis, with no ack copy to
    do it from."""
    private = PrivateRedis(tmp_path / "redis")
    private.start()
    database_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    settings = Settings(
        database_url=database_url, redis_url=private.url, state_dir=tmp_path, config=TEST_CONFIG
    )
    runtime = Runtime(settings)
    runtime.prepare()
    log = tmp_path / "worker.log"
    env = stack_env(database_url=database_url, redis_url=private.url, state_dir=tmp_path)
    with log.open("ab") as handle:
        worker = subprocess.Popen(
            worker_argv("warm", "tools.low", concurrency=1),
            env=env,
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    client = redis.Redis.from_url(private.url)
    try:
        wait_for_log(log, "ready.", worker)
        ledger = tmp_path / "ledger.txt"
        tool = runtime.registry.get("ledger")
        assert tool is not None
        first, second = (
            runtime.dispatcher.submit("agent", "ledger", {"path": str(ledger), "sleep": 2, "n": n})
            for n in (1, 2)
        )
        assert first.call_id is not None and second.call_id is not None
        wait_for(lambda: status(runtime, first.call_id) == "running", 30, "the first to run")
        # Both messages are out of the queue: one running, one taken ahead.
        wait_for(lambda: client.llen(tool.queue) == 0, 10, "the second to be taken")
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        assert status(runtime, first.call_id) == "succeeded"
        assert status(runtime, second.call_id) == "queued"
        waiting = client.lrange(tool.queue, 0, -1)
        assert sum(second.call_id.encode() in raw for raw in waiting) == 1
    finally:
        stop_group(worker)
        client.close()
        runtime.close()
        private.stop()


def status(runtime: Runtime, call_id: str) -> str:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row.status
