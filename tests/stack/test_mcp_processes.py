"""MCP over stateless HTTP with two API processes on one port: the log level a key set and
the calls its waiting requests made are in Redis, so whichever process takes the key's next
POST honours the level, and a ``notifications/cancelled`` reaches the call whichever
process waits for it.

Each POST here is sent on a connection the test knows the serving process of: a connection
belongs to the process that accepted it, so a fresh connection is opened (``GET /healthz``)
until the wanted process holds it, and the POST is checked to have gone over it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from router.runtime import Runtime

from ..support import services
from ..support.api_processes import client_port, serving_pid, serving_processes
from ..support.calls import result as call_result
from ..support.stack import Stack, stack_env
from ..support.waiting import wait_for

REDIS_DB = 8
PROCESSES = 2
# On the 2025-11-25 handshake, which has logging.
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """Two API processes; a worker on ``tools.low`` only, so a ``sleep`` call (medium)
    stays queued, and so cancellable, while its tools/call waits."""
    state_dir = tmp_path_factory.mktemp("mcp-processes")
    databases = services.database_for("sqlite", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=next(databases),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_API_PROCESSES=str(PROCESSES),
        # A tools/call no cancel reaches answers "queued" when this runs out.
        TOOLROUTER_MCP_CALL_WAIT_S="60",
    )
    the_stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(the_stack.settings)
    runtime.prepare()
    the_stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    runtime.close()
    try:
        the_stack.start_api()
        the_stack.start_worker(queues="tools.low")
        yield the_stack
    finally:
        the_stack.stop_all()
        services.flush(redis_url)
        databases.close()


@pytest.fixture(scope="module")
def pids(stack: Stack) -> list[int]:
    wait_for(lambda: len(serving_processes(stack)) == PROCESSES, 60, "the API's processes")
    return [process.pid for process in serving_processes(stack)]


class Pinned:
    """A client whose one connection the process ``pid`` accepted."""

    def __init__(self, http: httpx.Client, pid: int, port: int) -> None:
        self.http, self.pid, self.port = http, pid, port

    def post(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The JSON-RPC messages that answer ``message`` (none for a notification)."""
        response = self.http.post("/mcp", json=message, headers=HEADERS)
        assert response.status_code in (200, 202), response.text
        assert client_port(response) == self.port, "the POST went over another connection"
        if not response.content:
            return []
        if response.headers.get("content-type", "").startswith("application/json"):
            return [response.json()]
        return [
            json.loads(line.removeprefix("data:"))
            for line in response.text.splitlines()
            if line.startswith("data:") and line.removeprefix("data:").strip()
        ]


@contextmanager
def pinned(stack: Stack, pid: int) -> Iterator[Pinned]:
    """A fresh connection served by ``pid``: connections are opened until it takes one."""
    for _ in range(200):
        http = stack.client("agent", timeout=180)
        try:
            port = client_port(http.get("/healthz"))
            if serving_pid(stack, port) == pid:
                yield Pinned(http, pid, port)
                return
        finally:
            http.close()
    raise AssertionError(f"API process {pid} took none of 200 connections")


def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def answer_to(messages: list[dict[str, Any]], rid: int) -> dict[str, Any]:
    (answer,) = [m for m in messages if m.get("id") == rid and "method" not in m]
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def logged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/message"]


def test_a_log_level_set_at_one_process_holds_at_every_process(
    stack: Stack, pids: list[int]
) -> None:
    first, second = pids
    rid = 0

    def call_echo(pid: int) -> tuple[str, list[dict[str, Any]]]:
        nonlocal rid
        rid += 1
        with pinned(stack, pid) as http:
            messages = http.post(request(rid, "tools/call", {"name": "echo", "arguments": {}}))
        content = answer_to(messages, rid)["structuredContent"]
        assert content["status"] == "succeeded", content
        return content["call_id"], logged(messages)

    # No level set: no log messages from either process.
    assert [call_echo(pid)[1] for pid in pids] == [[], []]

    with pinned(stack, first) as http:
        assert answer_to(http.post(request(100, "logging/setLevel", {"level": "info"})), 100) == {}
    for pid in [first, second] * 6:
        call_id, entries = call_echo(pid)
        assert [(e["level"], e["data"]["status"]) for e in entries] == [
            ("info", "queued"),
            ("info", "running"),
            ("info", "succeeded"),
        ], pid
        assert {e["data"]["call_id"] for e in entries} == {call_id}

    # Raised at the other process: succeeded (info) is below warning everywhere now.
    with pinned(stack, second) as http:
        assert (
            answer_to(http.post(request(101, "logging/setLevel", {"level": "warning"})), 101) == {}
        )
    for pid in [first, second] * 2:
        assert call_echo(pid)[1] == []


def cancel_until_answered(
    stack: Stack, pid: int, rid: int, answered: Future[list[dict[str, Any]]]
) -> None:
    """``notifications/cancelled`` for request ``rid``, each on a connection of its own to
    ``pid``, until the request is answered: the first may come before the call is
    remembered, and a cancel that finds nothing is not answered either way."""
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": rid, "reason": "test"},
    }

    def sent_and_answered() -> bool:
        if not answered.done():
            with pinned(stack, pid) as http:
                assert http.post(cancel) == []
        return answered.done()

    wait_for(sent_and_answered, 90, f"request {rid} answered")


def test_a_cancel_at_either_process_cancels_the_call_a_request_waits_for_at_either(
    stack: Stack, pids: list[int]
) -> None:
    first, second = pids
    for rid, (waiting, cancelling) in enumerate(
        [(first, second), (second, first), (first, second), (second, second)], start=1
    ):
        call = request(rid, "tools/call", {"name": "sleep", "arguments": {"seconds": 1}})
        with pinned(stack, waiting) as waiter, ThreadPoolExecutor(1) as pool:
            answered = pool.submit(waiter.post, call)
            cancel_until_answered(stack, cancelling, rid, answered)
            messages = answered.result()
        content = answer_to(messages, rid)["structuredContent"]
        assert content["status"] == "cancelled", (waiting, cancelling, content)
        assert call_result(stack, content["call_id"], wait_s=0)["status"] == "cancelled"
