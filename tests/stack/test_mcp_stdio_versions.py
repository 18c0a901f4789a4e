"""``toolrouter mcp`` over stdio offers tasks to a 2025-11-25 handshake only, as ``/mcp``
does: an older client is told of no tasks, lists no ``execution``, gets a plain result for
a task it asks for anyway, and ``tasks/*`` is a method it does not have."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ..support.mcp_pipe import piped_session
from ..support.stack import Stack

TASK_ID = "call_" + "0" * 32


def session_answers(stack: Stack, version: str) -> dict[int, dict[str, Any]]:
    """The answers by id: 1 the handshake, 2 tools/list, 3 a call asking to be a task,
    4 tasks/list, 5 tasks/get."""
    call = {"name": "echo", "arguments": {"over": version}, "task": {"ttl": 60_000}}
    requests: list[dict[str, Any] | str | bytes] = [
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": 4, "method": "tasks/list", "params": {}},
        {"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"taskId": TASK_ID}},
    ]
    done = piped_session(stack, requests, version=version)
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    return {m["id"]: m for m in messages if isinstance(m.get("id"), int)}


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18"])
def test_an_older_client_over_stdio_is_offered_no_tasks(stack: Stack, version: str) -> None:
    answers = session_answers(stack, version)
    handshake = answers[1]["result"]
    assert handshake["protocolVersion"] == version
    assert "tasks" not in handshake["capabilities"]
    tools = answers[2]["result"]["tools"]
    assert tools and all("execution" not in tool for tool in tools)
    answer = answers[3]["result"]
    assert "task" not in answer
    assert answer["structuredContent"]["value"] == {"over": version}
    for asked in (4, 5):
        error = answers[asked]["error"]
        assert (error["code"], error["message"]) == (-32601, "Method not found")


def test_a_2025_11_25_client_over_stdio_is_offered_tasks(stack: Stack) -> None:
    answers = session_answers(stack, "2025-11-25")
    assert answers[1]["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    echo = {tool["name"]: tool for tool in answers[2]["result"]["tools"]}["echo"]
    assert echo["execution"]["taskSupport"] == "optional"
    task = answers[3]["result"]["task"]
    assert task["taskId"].startswith("call_")
    # Read concurrently with the call: what they list may not hold its task yet.
    assert isinstance(answers[4]["result"]["tasks"], list)
    assert answers[5]["error"]["code"] != -32601
