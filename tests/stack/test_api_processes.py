"""Several API processes on one port (``TOOLROUTER_API_PROCESSES``): any of them answers any
request, completions wake a waiting call whichever process took it, and one of them runs
SQLite's checkpoints."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import psutil
import pytest

from router.runtime import Runtime

from ..support import services
from ..support.stack import Stack, stack_env
from ..support.waiting import wait_for

REDIS_DB = 10
PROCESSES = 2


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("api-processes")
    databases = services.database_for("sqlite", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=next(databases),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_API_PROCESSES=str(PROCESSES),
    )
    the_stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(the_stack.settings)
    runtime.prepare()
    the_stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    runtime.close()
    try:
        the_stack.start_api()
        the_stack.start_worker()
        yield the_stack
    finally:
        the_stack.stop_all()
        services.flush(redis_url)
        databases.close()


def servers(stack: Stack) -> list[psutil.Process]:
    """The API's serving processes: uvicorn's workers under the process it was started as."""
    parent = psutil.Process(stack.processes["api"].pid)
    return [p for p in parent.children() if "spawn_main" in " ".join(p.cmdline())]


def served_by(stack: Stack, port: int) -> set[int]:
    """The serving processes holding an open connection to the API's port."""
    holders = set()
    for process in servers(stack):
        for conn in process.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_ESTABLISHED:
                holders.add(process.pid)
    return holders


def test_the_port_is_served_by_each_process(stack: Stack) -> None:
    wait_for(lambda: len(servers(stack)) == PROCESSES, 60, "the API's processes")
    port = int(stack.base_url.rsplit(":", 1)[1])
    clients: list[httpx.Client] = []
    try:
        # Connections kept open until both processes hold some: each was accepted by one.
        while len(served_by(stack, port)) < PROCESSES:
            assert len(clients) < 200, "one API process took every connection"
            client = stack.client("agent")
            clients.append(client)
            assert client.get("/healthz").status_code == 200
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
    assert holder in {p.pid for p in servers(stack)}
    with closing(sqlite3.connect(database)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
