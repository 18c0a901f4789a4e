"""toolrouter as an MCP server to the OpenAI Agents SDK, as docs/how-to/mcp-clients.md shows it.

The SDK's own MCP client (``agents.mcp.MCPServerStreamableHttp``) on ``/mcp`` of a real stack,
configured as the page configures it. No model is called: the tools are listed and called
through the server object, and through the tools an ``Agent`` built on it hands its model,
invoked as a run invokes them, so the assertions read what the model would read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from agents import Agent, FunctionTool, RunContextWrapper
from agents.mcp import MCPServerStreamableHttp
from agents.tool_context import ToolContext
from mcp import types

from ..support.stack import Stack

STATUS_TOOL = "toolrouter.call_status"
# Longer than the 30 s an ungated call is waited for, and than the wait_s the pending text
# suggests to call_status: the SDK's own default (5 s) gives up on slower calls.
SESSION_TIMEOUT_S = 60


@asynccontextmanager
async def agents_server(stack: Stack, **options: Any) -> AsyncIterator[MCPServerStreamableHttp]:
    """The SDK's client on ``/mcp`` with the agent key, as the how-to configures it."""
    async with MCPServerStreamableHttp(
        name="toolrouter",
        params={
            "url": f"{stack.base_url}/mcp",
            "headers": {"Authorization": f"Bearer {stack.keys['agent']}"},
        },
        client_session_timeout_seconds=SESSION_TIMEOUT_S,
        **options,
    ) as server:
        yield server


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


def text_of(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def approve(stack: Stack, request_id: str) -> None:
    with stack.client("approver") as http:
        response = http.post(f"/v1/approvals/{request_id}/approve", json={})
    assert response.status_code == 200, response.text


async def model_tools(server: MCPServerStreamableHttp) -> dict[str, FunctionTool]:
    """The tools an agent on ``server`` offers its model."""
    agent = Agent(name="assistant", mcp_servers=[server])
    tools = await agent.get_mcp_tools(RunContextWrapper(context=None))
    assert all(isinstance(tool, FunctionTool) for tool in tools)
    return {tool.name: tool for tool in tools if isinstance(tool, FunctionTool)}


async def invoke(tool: FunctionTool, arguments: dict[str, Any]) -> Any:
    """What the model reads back when it calls ``tool`` with ``arguments`` during a run."""
    raw = json.dumps(arguments)
    context = ToolContext(
        context=None, tool_name=tool.name, tool_call_id="call-1", tool_arguments=raw
    )
    return await tool.on_invoke_tool(context, raw)


def test_the_agents_sdk_lists_every_tool_with_its_schema_and_risk_hints(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack) as server:
            listed = {tool.name: tool for tool in await server.list_tools()}
            offered = await model_tools(server)
        with stack.client() as http:
            registered = {tool["name"]: tool for tool in http.get("/v1/tools").json()["tools"]}
        assert set(listed) == {*registered, STATUS_TOOL}
        assert set(offered) == set(listed)
        assert listed["strict"].input_schema == registered["strict"]["input_schema"]
        gated = listed["high_echo"]
        assert gated.annotations is not None and gated.annotations.destructive_hint is True
        assert gated.meta == {"toolrouter/risk": "high", "toolrouter/requires_approval": True}

    run(scenario)


def test_an_ungated_call_returns_its_value(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack) as server:
            result = await server.call_tool("echo", {"n": 1, "text": "héllo"})
        assert result.is_error is False
        assert json.loads(text_of(result)) == {"n": 1, "text": "héllo"}
        body = result.structured_content
        assert body is not None
        assert body["status"] == "succeeded" and body["value"] == {"n": 1, "text": "héllo"}

    run(scenario)


def test_a_gated_call_answers_pending_then_call_status_gives_its_value(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack) as server:
            pending = await server.call_tool("high_echo", {"amount": 5})
            assert pending.is_error is False
            body = pending.structured_content
            assert body is not None
            assert body["status"] == "pending" and body["pending"] is True
            call_id, request_id = body["call_id"], body["request_id"]
            assert text_of(pending).startswith(f"Awaiting approval: request {request_id} ")
            assert STATUS_TOOL in text_of(pending)

            await anyio.to_thread.run_sync(approve, stack, request_id)
            done = await server.call_tool(STATUS_TOOL, {"call_id": call_id, "wait_s": 30})
        assert done.is_error is False, text_of(done)
        assert done.structured_content is not None
        assert done.structured_content["status"] == "succeeded"
        assert json.loads(text_of(done)) == {"amount": 5}

    run(scenario)


def test_the_model_reads_the_value_the_pending_text_or_the_error(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack) as server:
            tools = await model_tools(server)
            value = await invoke(tools["echo"], {"n": 1})
            pending = await invoke(tools["high_echo"], {"amount": 7})
            error = await invoke(tools["value_error"], {})
        assert value == {"type": "text", "text": '{"n": 1}'}
        assert pending["type"] == "text"
        assert pending["text"].startswith("Awaiting approval: request req-")
        assert f"call {STATUS_TOOL} with " in pending["text"]
        assert error == {"type": "text", "text": "insufficient funds"}

    run(scenario)


def test_with_structured_content_the_model_reads_the_call_result(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack, use_structured_content=True) as server:
            tools = await model_tools(server)
            value = json.loads(await invoke(tools["echo"], {"n": 1}))
            pending = json.loads(await invoke(tools["high_echo"], {"amount": 8}))
            error = await invoke(tools["value_error"], {})
        assert value["status"] == "succeeded" and value["value"] == {"n": 1}
        assert pending["status"] == "pending" and pending["request_id"].startswith("req-")
        assert pending["call_id"].startswith("call_")
        # An error keeps its text: the SDK does not hand the model an error's body.
        assert error == {"type": "text", "text": "insufficient funds"}

    run(scenario)


def test_a_call_slower_than_the_sdks_default_timeout_returns_its_value(stack: Stack) -> None:
    async def scenario() -> None:
        async with agents_server(stack) as server:
            result = await server.call_tool("sleep", {"seconds": 6})
        assert result.is_error is False, text_of(result)
        assert result.structured_content is not None
        assert result.structured_content["value"] == 6

    run(scenario)
