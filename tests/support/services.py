"""Real services for the tests: Redis (local, else a private redis-server) and PostgreSQL.

PostgreSQL tests skip when no server answers, except under ``CI=true`` where its absence
is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text

from router.cli.privredis import redis_answers, start_private_redis
from router.db.engine import make_engine
from router.db.migrate import upgrade

LOCAL_REDIS = "redis://127.0.0.1:6379"
# Dedicated db numbers, so nothing else on the local Redis is disturbed.
REDIS_DBS = {"sqlite": 11, "postgresql": 12, "unit": 13}
PG_ADMIN_URL = os.environ.get(
    "TOOLROUTER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
# Per test session, so two sessions side by side never drop each other's template.
PG_TEMPLATE = f"toolrouter_test_template_{os.getpid()}"
IN_CI = os.environ.get("CI", "").lower() == "true"


@contextmanager
def redis_base_url(tmp: Path) -> Iterator[str]:
    """``redis://host:port`` of a Redis the tests may use.

    The local Redis (dedicated db numbers) when it answers; else, or when
    ``TOOLROUTER_TEST_PRIVATE_REDIS=1`` (to run two test sessions side by side), a private
    redis-server of our own.
    """
    private = os.environ.get("TOOLROUTER_TEST_PRIVATE_REDIS") == "1"
    if not private and redis_answers(LOCAL_REDIS + "/0"):
        yield LOCAL_REDIS
        return
    process, url = start_private_redis(tmp)
    try:
        yield url.rsplit("/", 1)[0]
    finally:
        process.terminate()
        process.wait(timeout=10)


def flush(url: str) -> None:
    redis.Redis.from_url(url).flushdb()


def postgres_or_skip() -> None:
    try:
        engine = create_engine(PG_ADMIN_URL)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        if IN_CI:
            pytest.fail(f"PostgreSQL is required in CI and does not answer: {exc}")
        pytest.skip(f"PostgreSQL not available: {exc}")


def _admin_execute(*statements: str) -> None:
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


def pg_url(database: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + database


def make_pg_template() -> None:
    """A migrated database that fresh test databases are cloned from."""
    _admin_execute(
        f"DROP DATABASE IF EXISTS {PG_TEMPLATE} WITH (FORCE)", f"CREATE DATABASE {PG_TEMPLATE}"
    )
    engine = make_engine(pg_url(PG_TEMPLATE))
    upgrade(engine)
    engine.dispose()


def drop_pg_template() -> None:
    _admin_execute(f"DROP DATABASE IF EXISTS {PG_TEMPLATE} WITH (FORCE)")


def fresh_pg_database() -> str:
    name = f"toolrouter_test_{uuid.uuid4().hex[:12]}"
    _admin_execute(f"CREATE DATABASE {name} TEMPLATE {PG_TEMPLATE}")
    return name


def drop_pg_database(name: str) -> None:
    _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fresh_sqlite_url(tmp: Path) -> str:
    path = tmp / f"toolrouter-{uuid.uuid4().hex[:8]}.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    return f"sqlite:///{path}"


def database_for(backend: str, tmp: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh migrated database URL on ``backend``, dropped when the generator closes."""
    if backend == "sqlite":
        yield fresh_sqlite_url(tmp)
        return
    request.getfixturevalue("pg_template")
    name = fresh_pg_database()
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)
