"""A decision is not held up by notifications to receivers that hang: with the approval
and notification workers started as `toolrouter up` starts them, a decision is taken while
notices wait on receivers, and while retries that fell due together hang, which on one
worker serving both would run ahead of it (Celery hands a due retry to its pool before it
takes a message from Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from router.cli.up import _children

from ..support.launcher import wait_for_log
from ..support.receivers import HangingScript
from ..support.scripted_http import ScriptedServer
from ..support.stack import Stack, own_stack
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

# More retries than two pool processes can attempt within the API's wait for a decision.
RETRIES = 8


@contextmanager
def stuck_stack(
    state_dir: Path,
    redis_url: str,
    request: pytest.FixtureRequest,
    receiver: HangingScript,
    **env: str,
) -> Iterator[Stack]:
    """The API, a tool worker, and the workers `toolrouter up` runs beside its tool workers
    with its argv, each once it consumes; every notice goes to ``receiver``."""
    with (
        ScriptedServer(receiver) as server,
        own_stack(
            state_dir,
            redis_url,
            request,
            keys={"agent": ["agent"], "stuck": ["stuck"]},
            tools=CONFIG,
            STUCK_URL=f"{server.url}/stuck",
            STUCK_SECRET="whsec-stuck-0123456789abcdef",
            # A receiver's timeout longer than the API waits for a decision: an attempt
            # lasts half of that wait (Settings.notify_attempt_s).
            TOOLROUTER_NOTIFY_TIMEOUT_S="30",
            **env,
        ) as stack,
    ):
        try:
            stack.start_api()
            stack.start_worker(concurrency=1)
            started = {
                child.name: stack.start(child.name, child.argv)
                for child in _children(stack.settings)
                if child.waits_for_ready and not child.name.startswith("worker-")
            }
            for name, process in started.items():
                wait_for_log(state_dir / f"{name}.log", "ready.", process)
            yield stack
        finally:
            # Else a warm shutdown waits for every attempt still held.
            receiver.release()


def submit(stack: Stack, count: int) -> list[str]:
    """The request ids of ``count`` gated calls, each announced to the stuck receiver."""
    with stack.client("agent") as http:
        answers = [
            http.post("/v1/calls", json={"tool": "stuck_wire", "args": {"n": n}}).json()
            for n in range(count)
        ]
    assert all(a["status"] == "pending" for a in answers), answers
    return [a["request_id"] for a in answers]


def approve_each(stack: Stack, request_ids: list[str]) -> None:
    with stack.client("stuck") as http:
        for request_id in request_ids:
            answer = http.post(f"/v1/approvals/{request_id}/approve", json={})
            assert answer.status_code == 200, answer.text
            assert answer.json()["released"] is True, answer.json()


def test_a_decision_is_taken_while_notices_wait_on_receivers_that_hang(
    tmp_path: Path, redis_base: str, request: pytest.FixtureRequest
) -> None:
    receiver = HangingScript()
    with stuck_stack(
        tmp_path,
        f"{redis_base}/{REDIS_DB}",
        request,
        receiver,
        TOOLROUTER_DECISION_TIMEOUT_S="8",
        TOOLROUTER_NOTIFY_BACKOFF_S="60",
    ) as stack:
        request_ids = submit(stack, 3)
        wait_for(lambda: len(receiver.held) >= 3, 60, "every notice held by the receiver")
        approve_each(stack, request_ids)


@pytest.mark.timeout(300)
def test_a_decision_is_taken_while_retries_that_fell_due_together_hang(
    tmp_path: Path, redis_base: str, request: pytest.FixtureRequest
) -> None:
    receiver = HangingScript(failures=1)
    with stuck_stack(
        tmp_path,
        f"{redis_base}/{REDIS_DB}",
        request,
        receiver,
        TOOLROUTER_DECISION_TIMEOUT_S="20",
        # Every retry falls due within the time its first attempts took.
        TOOLROUTER_NOTIFY_BACKOFF_S="2",
    ) as stack:
        request_ids = submit(stack, RETRIES)
        wait_for(lambda: receiver.failed() >= RETRIES, 60, "a 503 to every first attempt")
        # The retries are due: attempts under way hang, the others are due behind them.
        wait_for(lambda: len(receiver.held) >= 2, 60, "retries held by the receiver")
        approve_each(stack, request_ids)
