"""A decision is not held up by notifications to receivers that hang: the approval worker,
started exactly as `toolrouter approval-worker` starts it, takes a decision as soon as an
attempt under way ends, and an attempt never outlasts half the API's wait for a decision."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from router.cli import processes
from router.runtime import Runtime

from ..support import services
from ..support.launcher import wait_for_log
from ..support.scripted_http import ScriptedServer, Seen
from ..support.stack import Stack, stack_env
from ..support.waiting import wait_for

# Its own Redis db: the session's stacks flush theirs.
REDIS_DB = 10

CONFIG = """
notifications:
  channels:
    stuck-hook: {type: webhook, url: "${STUCK_URL}", secret: "${STUCK_SECRET}"}
  roles:
    stuck: [stuck-hook]
tools:
  - {name: stuck_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [stuck]}
"""


class Unanswered:
    """A receiver that takes every post and never answers it, until ``stop()``."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()

    async def __call__(self, seen: Seen, writer: Any) -> bool:
        await asyncio.get_running_loop().run_in_executor(None, self.stopped.wait, 120)
        return False


@pytest.fixture(scope="module")
def stuck_stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Stack, ScriptedServer]]:
    state_dir = tmp_path_factory.mktemp("stuck-stack")
    config = state_dir / "tools.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    receiver = Unanswered()
    server = ScriptedServer(receiver).__enter__()
    databases = services.database_for("sqlite", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=next(databases),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_CONFIG=str(config),
        STUCK_URL=f"{server.url}/stuck",
        STUCK_SECRET="whsec-stuck-0123456789abcdef",
        # A receiver's timeout set longer than the API waits for a decision.
        TOOLROUTER_NOTIFY_TIMEOUT_S="30",
        TOOLROUTER_DECISION_TIMEOUT_S="8",
        TOOLROUTER_NOTIFY_BACKOFF_S="60",
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare(check_tools=False)
    stack.keys = {name: runtime.keys.create(name, [name]) for name in ("agent", "stuck")}
    runtime.close()
    try:
        stack.start_api()
        stack.start_worker(concurrency=1)
        approvals = stack.start("approvals", processes.approvals_argv(stack.settings))
        wait_for_log(state_dir / "approvals.log", "ready.", approvals)
        yield stack, server
    finally:
        receiver.stop()
        stack.stop_all()
        server.__exit__()
        services.flush(redis_url)
        databases.close()


def test_a_decision_is_taken_while_both_pool_processes_wait_on_receivers(
    stuck_stack: tuple[Stack, ScriptedServer],
) -> None:
    stack, receiver = stuck_stack
    with stack.client("agent") as http:
        requests = [
            http.post("/v1/calls", json={"tool": "stuck_wire", "args": {"n": n}}).json()
            for n in range(3)
        ]
    assert all(r["status"] == "pending" for r in requests), requests
    # Both of the approval worker's pool processes are now in an attempt that gets no answer.
    wait_for(lambda: len(receiver.seen) >= 2, 30, "two notices reaching the receiver")
    with stack.client("stuck") as http:
        for pending in requests:
            answer = http.post(f"/v1/approvals/{pending['request_id']}/approve", json={})
            assert answer.status_code == 200, answer.text
            assert answer.json()["released"] is True, answer.json()
