"""Several API processes on one port (``TOOLROUTER_API_PROCESSES``): any of them answers any
request, completions wake a waiting call whichever process took it, and one of them runs
SQLite's checkpoints, and together they open no more database connections than one."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from router.api.app import app_from_env
from router.settings import get_settings

from ..support import services
from ..support.api_processes import client_port, serving_pid, serving_processes
from ..support.stack import Stack, own_stack, stack_env
from ..support.waiting import wait_for

REDIS_DB = 10
PROCESSES = 2


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("api-processes")
    with own_stack(
        state_dir,
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"]},
        TOOLROUTER_API_PROCESSES=str(PROCESSES),
    ) as the_stack:
        the_stack.start_api()
        the_stack.start_worker()
        yield the_stack


def test_the_port_is_served_by_each_process(stack: Stack) -> None:
    wait_for(lambda: len(serving_processes(stack)) == PROCESSES, 60, "the API's processes")
    clients: list[httpx.Client] = []
    seen: set[int | None] = set()
    try:
        # Connections kept open until both processes hold some: each was accepted by one.
        while len(seen - {None}) < PROCESSES:
            assert len(clients) < 200, "one API process took every connection"
            client = stack.client("agent")
            clients.append(client)
            answer = client.get("/healthz")
            assert answer.status_code == 200
            seen.add(serving_pid(stack, client_port(answer)))
    finally:
        for client in clients:
            client.close()


def test_waiting_calls_are_woken_whichever_process_took_them(stack: Stack) -> None:
    def call(i: int) -> object:
        # A connection of its own per call, so the calls spread over the processes.
        with stack.client("agent") as http:
            body = http.post(
                "/v1/calls", json={"tool": "echo", "args": {"i": i}, "wait_s": 30}
            ).json()
        return body.get("status"), body.get("value")

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, range(64)))
    assert answers == [("succeeded", {"i": i}) for i in range(64)]


def flock_holders(path: Path) -> list[int]:
    """The pids holding a flock on ``path``, from the kernel's table of locks."""
    inode = f":{path.stat().st_ino}"
    rows = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    return [int(row[4]) for row in rows if row[1] == "FLOCK" and row[5].endswith(inode)]


def test_one_process_runs_the_checkpoints(stack: Stack) -> None:
    database = Path(stack.settings.resolved_database_url.removeprefix("sqlite:///"))
    lock = Path(f"{database}-checkpoints.lock")
    wait_for(lambda: lock.exists() and bool(flock_holders(lock)), 60, "a checkpointer")
    [holder] = flock_holders(lock)
    assert holder in {p.pid for p in serving_processes(stack)}
    with closing(sqlite3.connect(database)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def connections_one_process_opens(pool: QueuePool) -> int:
    """How many connections ``pool`` hands out at once before a checkout must wait."""
    already = pool.checkedout()
    held: list[PoolProxiedConnection] = []
    try:
        while True:
            try:
                held.append(pool.connect())
            except PoolTimeout:
                return already + len(held)
            assert len(held) <= 64, "the pool has no bound"
    finally:
        for connection in held:
            connection.close()


@pytest.mark.postgres
def test_the_processes_share_one_pool_of_database_connections(
    redis_base: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """N processes of a full pool each would pass PostgreSQL's ``max_connections`` under a
    load one process takes without a refused connection; they split one pool instead."""
    databases = services.database_for("postgresql", tmp_path, request)
    env = stack_env(
        database_url=next(databases),
        redis_url=f"{redis_base}/{REDIS_DB}",
        state_dir=tmp_path,
        TOOLROUTER_API_PROCESSES=str(PROCESSES),
    )

    def opened(processes: int) -> int:
        """Connections one API process opens, built as ``toolrouter api`` builds it."""
        for name, value in {**env, "TOOLROUTER_API_PROCESSES": str(processes)}.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()
        runtime = app_from_env().state.runtime
        try:
            pool = runtime.engine.pool
            assert isinstance(pool, QueuePool)
            pool._timeout = 0.2  # a full pool answers at once, not after 30 s
            return connections_one_process_opens(pool)
        finally:
            runtime.close()
            get_settings.cache_clear()

    try:
        alone = opened(1)
        assert alone > 1
        assert opened(PROCESSES) * PROCESSES <= alone
    finally:
        databases.close()
