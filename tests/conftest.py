"""Fixtures: real Redis, real SQLite and PostgreSQL, real API and Celery worker processes."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.clock import FakeClock
from router.runtime import Runtime
from workers.pace import pace

from .support import services
from .support.runtimes import in_process_runtime
from .support.stack import TEST_CONFIG, Stack, stack_env

# Key material of every deployment the tests make (one folder per namespace), outside any
# state directory as in production, and never in the home directory of whoever runs them.
os.environ.setdefault("TOOLROUTER_SECRETS_DIR", tempfile.mkdtemp(prefix="toolrouter-test-secrets-"))

# Keys every stack has: name -> roles. The key's name is its identity in the audit log.
STACK_KEYS = {
    "agent": ["agent"],
    "agent2": ["agent"],
    "operator": ["operator"],
    "approver": ["approver"],
    "approver2": ["approver"],
    "approver3": ["approver"],
    "finance": ["finance"],
    "admin": ["admin"],
    "approving_agent": ["agent", "approver"],
}

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(autouse=True)
def _no_pace_from_other_tests() -> Iterator[None]:
    """Each test's in-process executors start with no tool's pace known (``workers.pace``
    is per process), so how many calls a shared message claims at once is the test's own."""
    pace.forget()
    yield
    pace.forget()


@pytest.fixture(scope="session")
def redis_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with services.redis_base_url(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def pg_template() -> Iterator[None]:
    services.postgres_or_skip()
    services.make_pg_template()
    yield
    services.drop_pg_template()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database per test, on each backend."""
    yield from services.database_for(request.param, tmp_path, request)


@pytest.fixture
def empty_pg_database() -> Iterator[str]:
    """A brand-new PostgreSQL database with no schema at all (not cloned from the template)."""
    services.postgres_or_skip()
    name = f"toolrouter_cli_{uuid.uuid4().hex[:12]}"
    services._admin_execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield services.pg_url(name)
    finally:
        services.drop_pg_database(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runtime(
    database_url: str, redis_base: str, tmp_path: Path, clock: FakeClock
) -> Iterator[Runtime]:
    """An in-process runtime on a fresh database, real Redis (unit db), fake clock."""
    with in_process_runtime(database_url, redis_base, tmp_path, clock, TEST_CONFIG) as rt:
        yield rt


@pytest.fixture(scope="session", params=BACKENDS)
def stack(
    request: pytest.FixtureRequest, redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A running toolrouter (API + one worker on every tool queue) per backend."""
    backend = request.param
    state_dir = tmp_path_factory.mktemp(f"stack-{backend}")
    databases = services.database_for(backend, state_dir, request)
    database_url = next(databases)
    redis_url = f"{redis_base}/{services.REDIS_DBS[backend]}"
    services.flush(redis_url)
    the_stack = Stack(
        env=stack_env(database_url=database_url, redis_url=redis_url, state_dir=state_dir),
        state_dir=state_dir,
    )
    rt = Runtime(the_stack.settings)
    rt.prepare()
    for name, roles in STACK_KEYS.items():
        the_stack.keys[name] = rt.keys.create(name, roles)
    rt.close()
    try:
        the_stack.start_api()
        the_stack.start_worker()
        the_stack.start_worker(name="approvals", queues="approvals,maintenance", concurrency=1)
        yield the_stack
    finally:
        the_stack.stop_all()
        services.flush(redis_url)
        databases.close()
