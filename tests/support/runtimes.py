"""An in-process runtime as the in-process suites use it: a fresh database, the unit Redis
db (flushed before and after), a fake clock, and a tool config of the test's choice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from router.clock import FakeClock
from router.runtime import Runtime
from router.settings import Settings

from . import services


@contextmanager
def in_process_runtime(
    database_url: str, redis_base: str, state_dir: Path, clock: FakeClock, config: Path
) -> Iterator[Runtime]:
    redis_url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    services.flush(redis_url)
    settings = Settings(
        database_url=database_url, redis_url=redis_url, state_dir=state_dir, config=config
    )
    runtime = Runtime(settings, clock=clock)
    runtime.prepare()
    try:
        yield runtime
    finally:
        runtime.close()
        services.flush(redis_url)
