"""A stack whose PostgreSQL database can be taken away: every connection refused
(``ALLOW_CONNECTIONS false``) and every backend terminated, then allowed again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, select, text

from router.db.schema import calls
from router.runtime import Runtime

from . import services
from .faults import FAST_RECOVERY
from .stack import Stack, stack_env, start_with_recovery


@dataclass
class PgFaultStack:
    stack: Stack
    runtime: Runtime
    database: str

    def outage(self, on: bool) -> None:
        """Refuse (or allow again) every connection to this test's database."""
        engine = create_engine(services.PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(
                    text(f"ALTER DATABASE {self.database} ALLOW_CONNECTIONS {str(not on).lower()}")
                )
                if on:
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = :name AND pid <> pg_backend_pid()"
                        ),
                        {"name": self.database},
                    )
        finally:
            engine.dispose()


@contextmanager
def pg_outage_stack(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PgFaultStack]:
    """A stack on a PostgreSQL database of its own, with an agent's and an operator's key,
    recovery quick; Redis at ``redis_url`` flushed before and after."""
    state_dir = tmp_path_factory.mktemp("db-faults")
    databases = services.database_for("postgresql", state_dir, request)
    database_url = next(databases)
    services.flush(redis_url)
    env = stack_env(
        database_url=database_url,
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_LEASE_GRACE_S="1",
        # An MCP call's wait ends within an outage a test makes.
        TOOLROUTER_MCP_CALL_WAIT_S="5",
        **FAST_RECOVERY,
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare()
    for name, roles in {"agent": ["agent"], "operator": ["operator"]}.items():
        stack.keys[name] = runtime.keys.create(name, roles)
    try:
        start_with_recovery(stack)
        yield PgFaultStack(stack, runtime, database_url.rsplit("/", 1)[1])
    finally:
        stack.stop_all()
        runtime.close()
        services.flush(redis_url)
        databases.close()


def newest_hold(runtime: Runtime, tool: str = "hold") -> tuple[str, str] | None:
    """The newest call of ``tool``: (id, status)."""
    with runtime.store.reading() as conn:
        row = conn.execute(
            select(calls.c.id, calls.c.status)
            .where(calls.c.tool == tool)
            .order_by(calls.c.created_at.desc())
            .limit(1)
        ).first()
    return None if row is None else (row.id, row.status)


def logged(stack: Stack, name: str, text: str) -> bool:
    return text in (stack.state_dir / f"{name}.log").read_text(errors="replace")
