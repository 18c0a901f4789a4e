"""Start-up guards (``router.guards``): limits that could lose or double a call are refused,
a Redis that may evict messages is reported once."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from router import guards
from router.broker import HARD_LIMIT_GRACE_S, VISIBILITY_TIMEOUT_S, celery_settings
from router.config import parse_config
from router.errors import ConfigError
from router.registry import ToolRegistry
from router.runtime import Runtime
from router.settings import Settings

from .faults import PrivateRedis, wait_for
from .stack import REPO, stack_env, stop_group, wait_for_log, worker_argv

# The longest timeout_s whose hard limit stays below the visibility timeout.
LONGEST_OK = VISIBILITY_TIMEOUT_S - HARD_LIMIT_GRACE_S - 1


def timeouts_of(timeout_s: float) -> dict[str, float]:
    """The tools' timeouts, as the registry holds them after loading this config."""
    text = (
        "tools:\n"
        f"  - {{name: long_job, handler: 'tests.fixture_tools:echo', timeout_s: {timeout_s}}}\n"
        "  - {name: echo, handler: 'tests.fixture_tools:echo'}\n"
    )
    registry = ToolRegistry.from_config(parse_config(text, file="t.yaml", env={}), file="t.yaml")
    return {tool.name: tool.spec.timeout_s for tool in registry}


def config_file(tmp_path: Path, timeout_s: float) -> Path:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n"
        f"  - {{name: long_job, handler: 'tests.fixture_tools:echo', timeout_s: {timeout_s}}}\n",
        encoding="utf-8",
    )
    return path


def test_the_broker_visibility_timeout_is_the_one_the_guard_checks() -> None:
    options = celery_settings("redis://127.0.0.1:1/0")["broker_transport_options"]
    assert options["visibility_timeout"] == VISIBILITY_TIMEOUT_S


def test_a_hard_limit_below_the_visibility_timeout_is_accepted() -> None:
    guards.check_time_limits(
        timeouts_of(LONGEST_OK),
        visibility_timeout_s=VISIBILITY_TIMEOUT_S,
        hard_limit_grace_s=HARD_LIMIT_GRACE_S,
    )


@pytest.mark.parametrize("timeout_s", [VISIBILITY_TIMEOUT_S - HARD_LIMIT_GRACE_S, 86_400])
def test_a_hard_limit_at_or_above_the_visibility_timeout_is_refused_naming_the_tool(
    timeout_s: float,
) -> None:
    with pytest.raises(ConfigError) as refused:
        guards.check_time_limits(
            timeouts_of(timeout_s),
            visibility_timeout_s=VISIBILITY_TIMEOUT_S,
            hard_limit_grace_s=HARD_LIMIT_GRACE_S,
        )
    assert refused.value.tool == "long_job"
    assert "visibility timeout of 7200 s" in str(refused.value)
    assert f"hard time limit {timeout_s + HARD_LIMIT_GRACE_S:g} s" in str(refused.value)


def test_runtime_prepare_refuses_such_a_tool(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=tmp_path,
        config=config_file(tmp_path, 86_400),
        redis_url="redis://127.0.0.1:1/0",
    )
    runtime = Runtime(settings)
    try:
        with pytest.raises(ConfigError, match="long_job"):
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
    with caplog.at_level(logging.WARNING, logger="router.guards"):
        warning = guards.warn_if_redis_may_evict(evicting_redis.url)
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
    with caplog.at_level(logging.WARNING, logger="router.guards"):
        assert guards.warn_if_redis_may_evict(evicting_redis.url) is None
    assert caplog.records == []


def test_a_redis_that_does_not_answer_is_not_a_start_up_error() -> None:
    assert guards.warn_if_redis_may_evict("redis://127.0.0.1:1/0") is None


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
    with log.open("ab") as handle:
        worker = subprocess.Popen(
            worker_argv("guarded", "tools.low", concurrency=1),
            env=env,
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return worker, log


def test_a_worker_refuses_to_start_with_a_hard_limit_at_the_visibility_timeout(
    tmp_path: Path, evicting_redis: PrivateRedis
) -> None:
    worker, log = start_worker(
        tmp_path, evicting_redis.url, TOOLROUTER_CONFIG=str(config_file(tmp_path, 86_400))
    )
    try:
        code = worker.wait(timeout=60)
    finally:
        stop_group(worker)
    text = log.read_text(errors="replace")
    assert code != 0, text
    assert "refusing to start the worker" in text and "long_job" in text, text
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
