"""Fixtures of the in-process suites: an executor as a worker process has it, and the
broker's Redis to look at what was published."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from router.runtime import Runtime
from workers.execution import Executor


@pytest.fixture
def executor(runtime: Runtime) -> Iterator[Executor]:
    notifier = runtime.notifier()
    yield Executor(runtime, notifier, actor="test-worker")
    notifier.client.close()


@pytest.fixture
def broker(runtime: Runtime) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(runtime.redis_url)
    yield client
    client.close()
