"""A pool process builds what it runs with (the runtime, and with it the config's MCP
sessions) as it starts, not in its first task. An approval worker whose MCP server takes
longer to start than a decision may wait still applies the first decision after start-up,
where building in the first task made that decision miss its deadline."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from ..support import services
from ..support.launcher import REPO, wait_for_log
from ..support.stack import Stack, own_stack, stack_env
from ..support.waiting import wait_for

REDIS_DB = 12
# Longer than the stacks' decision timeout (TOOLROUTER_DECISION_TIMEOUT_S, 15 s): a pool
# process that built its runtime only on the first decision would answer it too late.
SERVER_START_S = 20
CONFIG = f"""
tools:
  - {{name: gated_echo, handler: "tests.fixture_tools:echo", risk: high}}
mcp_servers:
  slow:
    command: sh
    args: [-c, 'sleep {SERVER_START_S} && exec "$0" -m tests.fixture_mcp_server', "${{PYTHON}}"]
    cwd: ${{REPO}}
"""


@pytest.fixture
def slow_stack(redis_base: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    with own_stack(
        tmp_path,
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"], "approver": ["approver"]},
        tools=CONFIG,
        PYTHON=sys.executable,
        REPO=str(REPO),
    ) as stack:
        yield stack


def test_the_first_decision_after_start_up_is_applied(slow_stack: Stack) -> None:
    slow_stack.start_api(timeout=180)  # it reads the slow server's tools first
    slow_stack.start_worker(name="approvals", queues="approvals,maintenance", concurrency=1)
    # Ready once its pool process has built its runtime, MCP sessions included.
    log = slow_stack.state_dir / "approvals.log"
    wait_for_log(log, " ready: ", slow_stack.processes["approvals"], timeout=180)
    with slow_stack.client() as http:
        call = http.post("/v1/calls", json={"tool": "gated_echo", "args": {"n": 1}}).json()
    assert call["status"] == "pending", call
    with slow_stack.client("approver") as http:
        response = http.post(f"/v1/approvals/{call['request_id']}/approve", json={})
    assert response.status_code == 200, response.text
    assert response.json()["released"] is True


# Its server writes its pid where the test reads it, then runs as the one above does.
COUNTED_CONFIG = """
mcp_servers:
  counted:
    command: sh
    args: [-c, 'echo $$ > "$0" && exec "$1" -m tests.fixture_mcp_server', "${PIDFILE}", "${PYTHON}"]
    cwd: ${REPO}
"""


def test_a_pool_process_that_cannot_start_leaves_no_mcp_server_running(
    redis_base: str, tmp_path: Path
) -> None:
    # The tools (and their MCP server) load; the database, checked after them, does not.
    config = tmp_path / "toolrouter.yaml"
    config.write_text(COUNTED_CONFIG, encoding="utf-8")
    (tmp_path / "state").mkdir()
    database = tmp_path / "not-a-database.db"
    database.write_bytes(b"not a SQLite file" * 1024)
    pidfile = tmp_path / "server.pid"
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=f"sqlite:///{database}",
        redis_url=redis_url,
        state_dir=tmp_path / "state",
        TOOLROUTER_CONFIG=str(config),
        PYTHON=sys.executable,
        REPO=str(REPO),
        PIDFILE=str(pidfile),
    )
    stack = Stack(env=env, state_dir=tmp_path / "state")
    try:
        process = stack.start_worker(concurrency=1)
        wait_for_log(stack.state_dir / "worker.log", " could not start", process)
        server = int(pidfile.read_text())
        wait_for(lambda: ended(server), timeout=15, what="the failed start-up's MCP server to end")
    finally:
        stack.stop_all()
        services.flush(redis_url)


def ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
