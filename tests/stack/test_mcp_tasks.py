"""MCP tasks, progress, logging, idempotency keys and cancellation on ``/mcp``, driven by
the official Python SDK's session (on the 2025-11-25 handshake, which tasks belong to)
against a real stack; approvals are decided through the HTTP API.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..support.calls import result as call_result
from ..support.calls import submit
from ..support.mcp_pipe import piped_session
from ..support.stack import Stack
from ..support.waiting import wait_for
from .test_api_calls import revoke_key, temporary_key
from .test_mcp_server import approve, run, stdio_params

RELATED_TASK = "io.modelcontextprotocol/related-task"
IDEMPOTENCY = "toolrouter/idempotency_key"


@asynccontextmanager
async def session(
    stack: Stack, key: str = "agent", transport: str = "http", **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client on the 2025-11-25 handshake, over ``/mcp`` or ``toolrouter mcp``."""
    if transport == "stdio":
        params = stdio_params(stack, "--key", stack.keys[key])
        async with Client(stdio_client(params), mode="legacy", **options) as client:
            yield client
        return
    headers = {"Authorization": f"Bearer {stack.keys[key]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(
            streamable_http_client(f"{stack.base_url}/mcp", http_client=http),
            mode="legacy",
            **options,
        ) as client,
    ):
        yield client


async def call_as_task(
    client: Client, tool: str, args: dict[str, Any], ttl: Any = None, **meta: Any
) -> types.Task:
    params: dict[str, Any] = {"name": tool, "arguments": args, "task": {}}
    if ttl is not None:
        params["task"]["ttl"] = ttl
    if meta:
        params["_meta"] = meta
    # The SDK's surface check knows tools/call only as answered by a CallToolResult, so
    # this one request goes through its dispatcher as is and the task is checked here.
    raw = await client.session._dispatcher.send_raw_request("tools/call", params, {})
    return types.CreateTaskResult.model_validate(raw, by_name=False).task


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.GetTaskResult)


async def task_result(client: Client, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CallToolResult)


async def cancel_task(client: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CancelTaskResult)


async def list_tasks(client: Client, cursor: str | None = None) -> types.ListTasksResult:
    request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
    return await client.session.send_request(request, types.ListTasksResult)


async def poll_until(client: Client, task_id: str, *statuses: str) -> types.GetTaskResult:
    with anyio.fail_after(60):
        while True:
            task = await get_task(client, task_id)
            if task.status in statuses:
                return task
            await anyio.sleep((task.poll_interval or 1000) / 1000)


# -- tasks ------------------------------------------------------------------------------


def rpc(stack: Stack, version: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request to ``/mcp`` as a client on protocol ``version`` sends it."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {stack.keys['agent']}",
        "MCP-Protocol-Version": version,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{stack.base_url}/mcp", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    # An event stream: the answer is its one message.
    (data,) = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    answer = json.loads(data)
    return answer


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18"])
def test_a_client_whose_protocol_has_no_tasks_is_offered_none(stack: Stack, version: str) -> None:
    hello = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    handshake = rpc(stack, version, "initialize", hello)["result"]
    assert handshake["protocolVersion"] == version
    assert "tasks" not in handshake["capabilities"]
    assert "tools" in handshake["capabilities"]
    tools = rpc(stack, version, "tools/list", {})["result"]["tools"]
    assert tools and all("execution" not in tool for tool in tools)
    # A task asked for anyway is a plain call, answered with its result.
    call = {"name": "echo", "arguments": {"old": version}, "task": {"ttl": 60_000}}
    answer = rpc(stack, version, "tools/call", call)["result"]
    assert "task" not in answer
    assert answer["structuredContent"]["value"] == {"old": version}
    for method in ("tasks/list", "tasks/get"):
        params = {"taskId": "call_" + "0" * 32} if method == "tasks/get" else {}
        error = rpc(stack, version, method, params)["error"]
        assert error["code"] == -32601 and error["message"] == "Method not found"


def test_a_2025_11_25_handshake_is_offered_tasks_over_raw_http(stack: Stack) -> None:
    version = "2025-11-25"
    hello = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    handshake = rpc(stack, version, "initialize", hello)["result"]
    assert handshake["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
    assert "result" in rpc(stack, version, "tasks/list", {})


def test_the_server_advertises_tasks_and_every_tool_may_run_as_one(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as client:
            capabilities = client.server_capabilities
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert capabilities.tasks is not None
        assert capabilities.tasks.list is not None and capabilities.tasks.cancel is not None
        assert capabilities.tasks.requests is not None
        assert capabilities.tasks.requests.tools is not None
        assert capabilities.tasks.requests.tools.call is not None
        assert capabilities.logging is not None
        for name in ("echo", "high_echo"):
            execution = tools[name].execution
            assert execution is not None and execution.task_support == "optional"
        status = tools["toolrouter.call_status"].execution
        assert status is not None and status.task_support == "forbidden"

    run(scenario)


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_an_ungated_call_as_a_task_completes_with_the_calls_result(
    stack: Stack, transport: str
) -> None:
    async def scenario() -> None:
        async with session(stack, transport=transport) as client:
            task = await call_as_task(client, "echo", {"n": 7}, ttl=60_000)
            assert task.task_id.startswith("call_")
            assert task.status in ("working", "completed")
            assert task.ttl == 60_000 and task.poll_interval is not None
            answer = await task_result(client, task.task_id)
            done = await get_task(client, task.task_id)
        assert answer.is_error is False
        assert answer.structured_content is not None
        assert answer.structured_content["value"] == {"n": 7}
        assert answer.meta is not None and answer.meta[RELATED_TASK] == {"taskId": task.task_id}
        assert done.status == "completed"
        # The task is the call: the HTTP API reads the same outcome.
        assert call_result(stack, task.task_id)["value"] == {"n": 7}

    run(scenario)


def test_a_gated_call_is_a_working_task_until_approved(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as client:
            task = await call_as_task(client, "high_echo", {"x": 1})
            assert task.status == "working"
            assert task.status_message is not None
            assert "awaiting approval: request req-" in task.status_message
            assert "may be approved by: approver" in task.status_message
            request_id = task.status_message.split("request ")[1].split(" ")[0]
            again = await get_task(client, task.task_id)
            assert again.status == "working"
            await anyio.to_thread.run_sync(approve, stack, request_id)
            answer = await task_result(client, task.task_id)
            done = await get_task(client, task.task_id)
        assert answer.is_error is False
        assert answer.structured_content is not None
        assert answer.structured_content["value"] == {"x": 1}
        assert done.status == "completed"

    run(scenario)


def test_a_key_revoked_while_its_tasks_result_waits_gets_an_error_not_the_outcome(
    stack: Stack,
) -> None:
    name, token = temporary_key(stack, ["agent"])
    stack.keys[name] = token

    async def scenario() -> None:
        async with session(stack, key=name) as client:
            task = await call_as_task(client, "high_echo", {"secret": "kept"})
            assert task.status_message is not None
            request_id = task.status_message.split("request ")[1].split(" ")[0]
            outcome: list[Any] = []

            async def wait_for_result() -> None:
                try:
                    outcome.append(await task_result(client, task.task_id))
                except MCPError as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as waiting:
                waiting.start_soon(wait_for_result)
                await anyio.to_thread.run_sync(revoke_key, stack, name)
                # Released after the revocation: the waiting request sees it finish.
                await anyio.to_thread.run_sync(approve, stack, request_id)
        (answer,) = outcome
        assert isinstance(answer, MCPError), answer
        assert "key revoked" in str(answer)

    run(scenario)


def test_a_denied_call_fails_its_task_and_a_cancelled_one_is_cancelled(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as client:
            denied = await call_as_task(client, "high_echo", {"deny": True})
            assert denied.status_message is not None
            request_id = denied.status_message.split("request ")[1].split(" ")[0]
            await anyio.to_thread.run_sync(approve, stack, request_id, "deny")
            failed = await poll_until(client, denied.task_id, "failed")
            outcome = await task_result(client, denied.task_id)

            pending = await call_as_task(client, "high_echo", {"cancel": True})
            cancelled = await cancel_task(client, pending.task_id)
            assert cancelled.status == "cancelled"
            with pytest.raises(MCPError, match="task is already cancelled"):
                await cancel_task(client, pending.task_id)
        assert failed.status_message is not None and failed.status_message.startswith("denied")
        assert outcome.is_error is True
        assert outcome.structured_content is not None
        assert outcome.structured_content["status"] == "denied"
        assert call_result(stack, pending.task_id)["status"] == "cancelled"

    run(scenario)


def test_tasks_belong_to_the_key_that_made_them(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as mine:
            made = {(await call_as_task(mine, "echo", {"i": i})).task_id for i in range(3)}
            listed = await list_tasks(mine)
        assert made <= {task.task_id for task in listed.tasks}
        async with session(stack, key="agent2") as theirs:
            theirs_listed = await list_tasks(theirs)
            assert not made & {task.task_id for task in theirs_listed.tasks}
            some = next(iter(made))
            for attempt in (get_task, task_result, cancel_task):
                with pytest.raises(MCPError, match="unknown task"):
                    await attempt(theirs, some)
            with pytest.raises(MCPError, match="invalid cursor"):
                await list_tasks(theirs, cursor="not a cursor")
            # Ids no database stores (a NUL on PostgreSQL) name no task either.
            for made_up in ("a\x00", "call_" + "0" * 31 + "\x00", "x" * 10_000):
                for attempt in (get_task, task_result, cancel_task):
                    with pytest.raises(MCPError, match="unknown task"):
                        await attempt(theirs, made_up)

    run(scenario)


def test_tasks_list_pages_through_every_task_newest_first(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack, key="agent2") as client:
            made = [(await call_as_task(client, "echo", {"i": i})).task_id for i in range(55)]
            seen: list[str] = []
            cursor: str | None = None
            while True:
                page = await list_tasks(client, cursor)
                seen += [task.task_id for task in page.tasks]
                cursor = page.next_cursor
                if cursor is None:
                    break
        assert len(seen) == len(set(seen))
        assert [task for task in seen if task in made] == made[::-1]

    run(scenario)


def test_a_refused_call_as_a_task_is_a_json_rpc_error_and_no_task(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as client:
            with pytest.raises(MCPError, match="unknown tool: no_such"):
                await call_as_task(client, "no_such", {})
            with pytest.raises(MCPError, match="answers at once"):
                await call_as_task(client, "toolrouter.call_status", {"call_id": "x"})

    run(scenario)


# -- progress and logging ---------------------------------------------------------------


def test_progress_follows_the_call_from_queued_to_finished(stack: Stack, tmp_path: Path) -> None:
    release = tmp_path / "release"
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))
        if message == "running":
            release.touch()

    async def scenario() -> None:
        async with session(stack) as client:
            result = await client.call_tool(
                "hold", {"until": str(release)}, progress_callback=on_progress
            )
        assert result.is_error is False

    run(scenario)
    messages = [message for _, _, message in seen]
    assert messages[0] == "queued" and "running" in messages and messages[-1] == "succeeded"
    progress = [value for value, _, _ in seen]
    assert progress == sorted(set(progress))
    assert seen[-1][1] == seen[-1][0]


def test_a_key_revoked_while_its_call_runs_hears_nothing_of_the_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    """Progress and log notifications would carry the final status (and a failure's error):
    a key revoked during the wait is refused before they are sent, not only in the reply."""
    name, token = temporary_key(stack, ["agent"])
    stack.keys[name] = token
    release = tmp_path / "release"
    seen: list[str | None] = []

    def revoke_then_release() -> None:
        revoke_key(stack, name)

        def refused() -> bool:
            with stack.client(name) as http:
                return http.get("/v1/tools").status_code == 401

        wait_for(refused, 30, "the API refusing the revoked key")
        release.touch()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        if message == "running":
            await anyio.to_thread.run_sync(revoke_then_release)

    async def scenario() -> str:
        async with session(stack, key=name) as client:
            try:
                result = await client.call_tool(
                    "hold", {"until": str(release)}, progress_callback=on_progress
                )
            except MCPError as exc:
                return str(exc)
        return json.dumps(result.model_dump(mode="json"))

    answer = anyio.run(scenario)
    assert "running" in seen and "succeeded" not in seen
    assert "key revoked" in answer and "released" not in answer


# Logging left the protocol in 2026-07-28; the SDK's client warns, handshake clients use it.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
def test_log_messages_honour_the_level_the_key_set(stack: Stack) -> None:
    entries: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        entries.append(params)

    async def scenario() -> None:
        async with session(stack, logging_callback=on_log) as client:
            await client.set_logging_level("debug")
            await client.call_tool("echo", {"loud": True})
            await client.set_logging_level("warning")
            await client.call_tool("echo", {"quiet": True})
            await client.call_tool("value_error", {})

    run(scenario)
    assert {entry.level for entry in entries} == {"info", "warning"}
    loud = [entry.data for entry in entries if entry.level == "info"]
    assert [data["status"] for data in loud] == ["queued", "running", "succeeded"]
    (failed,) = [entry for entry in entries if entry.level == "warning"]
    assert failed.logger == "toolrouter"
    assert failed.data["status"] == "failed" and failed.data["error"] == "insufficient funds"


# -- idempotency keys and cancellation --------------------------------------------------


def test_an_idempotency_key_in_meta_makes_a_retry_the_same_call(
    stack: Stack, tmp_path: Path
) -> None:
    ledger = tmp_path / "runs"
    key = f"mcp-{uuid.uuid4().hex}"

    async def scenario() -> list[types.CallToolResult]:
        async with session(stack) as client:
            return [
                await client.call_tool("ledger", {"path": str(ledger)}, meta={IDEMPOTENCY: key})
                for _ in range(2)
            ]

    first, second = anyio.run(scenario)
    assert first.structured_content is not None and second.structured_content is not None
    assert first.structured_content["call_id"] == second.structured_content["call_id"]
    assert len(ledger.read_text().splitlines()) == 1

    async def reused() -> types.CallToolResult:
        async with session(stack) as client:
            return await client.call_tool("echo", {"other": 1}, meta={IDEMPOTENCY: key})

    conflict = anyio.run(reused)
    assert conflict.is_error is True

    async def not_a_string() -> types.CallToolResult:
        async with session(stack) as client:
            return await client.call_tool("echo", {}, meta={IDEMPOTENCY: 5})

    bad = anyio.run(not_a_string)
    assert bad.is_error is True
    assert bad.content[0].text == f"_meta.{IDEMPOTENCY} must be a string"  # type: ignore[union-attr]

    async def unprintable() -> list[types.CallToolResult]:
        async with session(stack) as client:
            return [
                await client.call_tool("echo", {}, meta={IDEMPOTENCY: text})
                for text in ("a\x00", "d\x7f", "")
            ]

    # Refused before the key's lookup: on PostgreSQL its error would quote the SQL.
    for refused in anyio.run(unprintable):
        assert refused.is_error is True
        assert refused.content[0].text == (  # type: ignore[union-attr]
            "idempotency key must be 1-256 printable characters"
        )


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_cancelling_a_waiting_tools_call_cancels_its_queued_call(
    stack: Stack, tmp_path: Path, transport: str
) -> None:
    release = tmp_path / "release"
    with stack.client() as http:
        # Both pool processes of the worker busy: the next medium call stays queued.
        blockers = [submit(http, "hold", {"until": str(release)})["call_id"] for _ in range(2)]
    try:
        wait_for(
            lambda: all(call_result(stack, c, wait_s=0)["status"] == "running" for c in blockers),
            60,
            "both blockers running",
        )
        key = f"cancel-{uuid.uuid4().hex}"
        args = {"until": str(release)}

        def replayed_status() -> str:
            # The same key and arguments over HTTP answer with the call MCP made.
            with stack.client() as http:
                body = submit(http, "hold", args, idempotency_key=key)
            return str(body["status"])

        async def scenario() -> None:
            async with session(stack, transport=transport) as client:
                with anyio.move_on_after(1):
                    await client.call_tool("hold", args, meta={IDEMPOTENCY: key})
                # The client sends notifications/cancelled as it gives up; the session
                # stays open until the server has acted on it.
                await anyio.to_thread.run_sync(
                    lambda: wait_for(
                        lambda: replayed_status() == "cancelled", 60, "the call cancelled"
                    )
                )

        run(scenario)
    finally:
        release.touch()


def test_a_task_asks_for_a_ttl_in_whole_milliseconds(stack: Stack) -> None:
    async def scenario() -> None:
        async with session(stack) as client:
            for ttl in (-1, True, "soon", 1500.5):
                with pytest.raises(MCPError, match=r"task\.ttl must be a whole number"):
                    await call_as_task(client, "echo", {}, ttl=ttl)
            shortest = await call_as_task(client, "echo", {}, ttl=0)
            # JSON has one kind of number: 1500.0 is 1500.
            written_as_float = await call_as_task(client, "echo", {}, ttl=1500.0)
        assert shortest.ttl == 1000
        assert written_as_float.ttl == 1500

    run(scenario)


def test_a_task_waiting_for_approval_outlives_its_ttl_and_a_finished_one_does_not(
    stack: Stack,
) -> None:
    async def scenario() -> None:
        async with session(stack, key="agent2") as client:
            gated = await call_as_task(client, "high_echo", {"ttl": "short"}, ttl=1000)
            done = await call_as_task(client, "echo", {"ttl": "short"}, ttl=1000)
            await task_result(client, done.task_id)
            await anyio.sleep(1.2)
            # Past its TTL but still pending: it can be read, listed and cancelled.
            assert (await get_task(client, gated.task_id)).status == "working"
            listed = {task.task_id for task in (await list_tasks(client)).tasks}
            assert gated.task_id in listed and done.task_id not in listed
            with pytest.raises(MCPError, match="unknown task"):
                await get_task(client, done.task_id)
            assert (await cancel_task(client, gated.task_id)).status == "cancelled"

    run(scenario)


def test_a_tasks_result_that_waited_past_the_ttl_gets_the_outcome(stack: Stack) -> None:
    """Approved after the task's TTL ran out: the request blocked on its outcome gets the
    outcome (the call ran), not ``unknown task``; a later read finds the task gone."""

    async def scenario() -> None:
        async with session(stack, key="agent2") as client:
            task = await call_as_task(client, "high_echo", {"past": "ttl"}, ttl=1000)
            assert task.status_message is not None
            request_id = task.status_message.split("request ")[1].split(" ")[0]
            outcome: list[Any] = []

            async def wait_for_result() -> None:
                try:
                    outcome.append(await task_result(client, task.task_id))
                except MCPError as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as waiting:
                waiting.start_soon(wait_for_result)
                await anyio.sleep(1.5)
                await anyio.to_thread.run_sync(approve, stack, request_id)
            with pytest.raises(MCPError, match="unknown task"):
                await get_task(client, task.task_id)
        (answer,) = outcome
        assert isinstance(answer, types.CallToolResult), answer
        assert answer.structured_content is not None
        assert answer.structured_content["value"] == {"past": "ttl"}

    run(scenario)


def test_repeating_a_call_with_its_idempotency_key_renews_its_task(stack: Stack) -> None:
    key = f"task-{uuid.uuid4().hex}"

    async def scenario() -> None:
        async with session(stack) as client:
            first = await call_as_task(client, "echo", {"r": 1}, ttl=1000, **{IDEMPOTENCY: key})
            await task_result(client, first.task_id)
            await anyio.sleep(1.2)
            with pytest.raises(MCPError, match="unknown task"):
                await get_task(client, first.task_id)
            again = await call_as_task(client, "echo", {"r": 1}, ttl=60_000, **{IDEMPOTENCY: key})
            assert again.task_id == first.task_id
            assert (await get_task(client, again.task_id)).status == "completed"

    run(scenario)


@pytest.mark.parametrize("created_at", [2**63, -1])
def test_a_cursor_out_of_range_is_an_invalid_cursor(stack: Stack, created_at: int) -> None:
    cursor = base64.urlsafe_b64encode(f"{created_at}:call_x".encode()).decode()

    async def scenario() -> None:
        async with session(stack) as client:
            with pytest.raises(MCPError, match=r"^invalid cursor$"):
                await list_tasks(client, cursor)

    run(scenario)


def test_piped_stdio_exits_after_a_cancelled_request(stack: Stack) -> None:
    """A request the client cancelled is never answered; the server does not wait for it."""
    done = piped_session(
        stack,
        [
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 5}},
            },
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}},
        ],
        version="2025-11-25",
    )
    assert done.returncode == 0, done.stderr
    answered = {json.loads(line).get("id") for line in done.stdout.splitlines()}
    assert 1 in answered and 2 not in answered, done.stdout
