"""Start-up guards (``router.guards``, ``workers.process``): a Redis that may evict messages
is reported once, a worker whose tool config does not load does not start."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from router.errors import ConfigError
from router.messaging.redis_clients import warn_if_redis_may_evict
from router.runtime import Runtime
from router.settings import Settings

from ..support.faults import PrivateRedis
from ..support.launcher import stop_group, wait_for_log
from ..support.stack import spawn_worker, stack_env
from ..support.waiting import wait_for

BROKEN_CONFIG = "tools:\n  - {name: broken, handler: 'tests.fixture_tools:echo', timeout_s: -1}\n"


def test_runtime_prepare_refuses_a_tool_config_that_does_not_load(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(BROKEN_CONFIG, encoding="utf-8")
    settings = Settings(state_dir=tmp_path, config=config, redis_url="redis://127.0.0.1:1/0")
    runtime = Runtime(settings)
    try:
        with pytest.raises(ConfigError, match="broken"):
            runtime.prepare()
        # Commands that load no tools (keys, audit, db) still start.
        runtime.prepare(check_tools=False)
    finally:
        runtime.close()


@pytest.fixture
def evicting_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    private = PrivateRedis(tmp_path / "redis", extra=("--maxmemory-policy", "allkeys-lru"))
    private.start()
    yield private
    private.stop()


def test_a_redis_that_may_evict_is_reported(
    evicting_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="router.messaging.redis_clients"):
        warning = warn_if_redis_may_evict(evicting_redis.url)
    assert warning is not None and "'allkeys-lru', not 'noeviction'" in warning
    assert [r.getMessage() for r in caplog.records] == [warning]


def test_a_redis_that_never_evicts_is_not_reported(
    evicting_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis.Redis.from_url(evicting_redis.url)
    try:
        client.config_set("maxmemory-policy", "noeviction")
    finally:
        client.close()
    with caplog.at_level(logging.WARNING, logger="router.messaging.redis_clients"):
        assert warn_if_redis_may_evict(evicting_redis.url) is None
    assert caplog.records == []


def test_a_redis_that_does_not_answer_is_not_a_start_up_error() -> None:
    assert warn_if_redis_may_evict("redis://127.0.0.1:1/0") is None


# -- the worker's start-up ----------------------------------------------------------------


def start_worker(
    tmp_path: Path, redis_url: str, **extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """A worker on ``tools.low`` against a fresh SQLite database; returns it and its log."""
    env = stack_env(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        redis_url=redis_url,
        state_dir=tmp_path,
        **extra,
    )
    log = tmp_path / "worker.log"
    return spawn_worker("guarded", env, log), log


def test_a_worker_refuses_to_start_with_a_tool_config_that_does_not_load(
    tmp_path: Path, evicting_redis: PrivateRedis
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(BROKEN_CONFIG, encoding="utf-8")
    worker, log = start_worker(tmp_path, evicting_redis.url, TOOLROUTER_CONFIG=str(config))
    try:
        code = worker.wait(timeout=60)
    finally:
        stop_group(worker)
    text = log.read_text(errors="replace")
    assert code != 0, text
    assert "refusing to start the worker" in text and "broken" in text, text
    assert "ready." not in text


def test_a_worker_on_an_evicting_redis_warns_once_and_serves(
    tmp_path: Path, evicting_redis: PrivateRedis
) -> None:
    worker, log = start_worker(tmp_path, evicting_redis.url)
    try:
        wait_for_log(log, "ready.", worker)
        wait_for(lambda: "maxmemory-policy" in log.read_text(errors="replace"), 10, "a warning")
    finally:
        stop_group(worker)
    assert log.read_text(errors="replace").count("maxmemory-policy is 'allkeys-lru'") == 1
