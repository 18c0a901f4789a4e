"""toolrouter as an MCP server, driven by the official Python MCP client against a real stack.

``/mcp`` over streamable HTTP (both the 2026 per-request protocol the client negotiates by
default and the older initialize handshake most clients still speak), and ``toolrouter mcp``
over stdio. Calls made this way go through the same dispatcher, approvals and audit log as
HTTP calls, so the assertions below read the audit log and approve through the HTTP API.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.transport_security import TransportSecurityMiddleware

from router.cli import processes
from router.mcp import transport_security
from router.mcp.http import BAD_REQUEST_ID, NOT_JSON_RPC
from router.mcp.tools import render
from router.results import CallResult
from router.settings import Settings

from ..support.audit import audit_events, audit_rows
from ..support.launcher import REPO, free_port, stop_group, wait_for_http
from ..support.mcp_pipe import piped_session
from ..support.stack import Stack

STATUS_TOOL = "toolrouter.call_status"
MODES = ["auto", "legacy"]


@asynccontextmanager
async def mcp_session(
    stack: Stack, key: str = "agent", mode: str = "auto", **headers: str
) -> AsyncIterator[Client]:
    """The official client on ``/mcp``, carrying ``key`` as its bearer header."""
    headers = {"Authorization": f"Bearer {stack.keys[key]}", **headers}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(
            streamable_http_client(f"{stack.base_url}/mcp", http_client=http), mode=mode
        ) as client,
    ):
        yield client


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


def text_of(result: types.CallToolResult) -> str:
    (content,) = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def audit_trail(stack: Stack, after_seq: int = 0, **filters: Any) -> list[tuple[str, str]]:
    """(event, actor) of every audit row matching ``filters`` after ``after_seq``."""
    rows = audit_rows(stack, after_seq=after_seq, **filters)
    return [(row["event"], row["actor"]) for row in rows]


def last_seq(stack: Stack) -> int:
    rows = audit_rows(stack, after_seq=_last_seen.get(stack.base_url, 0))
    if rows:
        _last_seen[stack.base_url] = rows[-1]["seq"]
    return _last_seen.get(stack.base_url, 0)


_last_seen: dict[str, int] = {}


def approve(stack: Stack, request_id: str, verb: str = "approve") -> None:
    with stack.client("approver") as http:
        response = http.post(f"/v1/approvals/{request_id}/{verb}", json={})
    assert response.status_code == 200, response.text


# -- tools/list ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_agent_lists_every_tool_with_its_schema_and_risk_annotations(
    stack: Stack, mode: str
) -> None:
    async def scenario() -> None:
        async with mcp_session(stack, mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        with stack.client() as http:
            registered = {tool["name"]: tool for tool in http.get("/v1/tools").json()["tools"]}
        assert set(listed) == {*registered, STATUS_TOOL}
        strict = listed["strict"]
        assert strict.input_schema == registered["strict"]["input_schema"]
        assert strict.input_schema["required"] == ["to", "amount"]
        echo = listed["echo"]
        assert echo.description == "Echo the arguments"
        assert echo.annotations is not None
        assert echo.annotations.read_only_hint is True
        assert echo.annotations.destructive_hint is False
        gated = listed["high_echo"]
        assert gated.annotations is not None
        assert gated.annotations.destructive_hint is True
        assert gated.annotations.read_only_hint is False
        assert gated.description is not None and STATUS_TOOL in gated.description
        assert gated.meta == {"toolrouter/risk": "high", "toolrouter/requires_approval": True}
        status = listed[STATUS_TOOL]
        assert status.input_schema["required"] == ["call_id"]

    run(scenario)


def test_a_key_without_the_agent_role_sees_no_tools_and_cannot_call_one(stack: Stack) -> None:
    async def scenario() -> None:
        for key in ("approver", "operator"):
            async with mcp_session(stack, key=key) as client:
                assert (await client.list_tools()).tools == []
                result = await client.call_tool("echo", {"n": 1})
            assert result.is_error is True
            assert text_of(result) == "agent role required to submit calls"

    before = last_seq(stack)
    run(scenario)
    # A refusal for want of a role is not an attempt on the tool: nothing is audited.
    assert audit_trail(stack, before) == []


# -- tools/call ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_call_returns_the_value_as_structured_content_and_as_json_text(
    stack: Stack, mode: str
) -> None:
    async def scenario() -> None:
        async with mcp_session(stack, mode=mode) as client:
            result = await client.call_tool("echo", {"n": 1, "text": "héllo"})
            falsy = await client.call_tool("value", {"value": 0})
        assert result.is_error is False
        body = result.structured_content
        assert body is not None
        assert body["ok"] is True and body["status"] == "succeeded" and body["tool"] == "echo"
        assert body["value"] == {"n": 1, "text": "héllo"}
        assert body["call_id"].startswith("call_")
        assert json.loads(text_of(result)) == {"n": 1, "text": "héllo"}
        # A value of 0 is a success like any other.
        assert falsy.is_error is False
        assert falsy.structured_content is not None
        assert falsy.structured_content["value"] == 0
        assert text_of(falsy) == "0"

    run(scenario)


def test_handler_error_is_an_error_result_with_the_raisers_own_message(stack: Stack) -> None:
    async def scenario() -> None:
        async with mcp_session(stack) as client:
            result = await client.call_tool("value_error", {})
        assert result.is_error is True
        assert text_of(result) == "insufficient funds"
        body = result.structured_content
        assert body is not None
        assert body["status"] == "failed" and body["error_type"] == "ValueError"

    run(scenario)


def test_unknown_tool_and_invalid_arguments_are_error_results_audited_like_http(
    stack: Stack,
) -> None:
    results: dict[str, types.CallToolResult] = {}
    unknown = f"no_such_tool_{uuid.uuid4().hex[:8]}"
    before = last_seq(stack)

    async def scenario() -> None:
        async with mcp_session(stack) as client:
            results["unknown"] = await client.call_tool(unknown, {})
            results["invalid"] = await client.call_tool("strict", {"to": "x"})

    run(scenario)
    assert results["unknown"].is_error is True
    assert text_of(results["unknown"]) == f"unknown tool: {unknown}"
    assert results["invalid"].is_error is True
    assert text_of(results["invalid"]).startswith("invalid arguments: ")
    assert audit_trail(stack, before, tool=unknown) == [("unknown", "agent")]
    assert audit_trail(stack, before, tool="strict") == [("invalid", "agent")]


def test_mcp_calls_are_queued_and_audited_like_http_calls(stack: Stack) -> None:
    found: dict[str, Any] = {}

    async def scenario() -> None:
        async with mcp_session(stack, key="agent2") as client:
            result = await client.call_tool("context", {})
        assert result.structured_content is not None
        found.update(result.structured_content)

    run(scenario)
    assert found["status"] == "succeeded"
    # The handler saw the key's name as the requester, as with an HTTP call.
    assert found["value"]["requested_by"] == "agent2"
    assert found["value"]["call_id"] == found["call_id"]
    events = audit_events(stack, found["call_id"])
    assert events[0] == ("queued", "agent2")
    assert [event for event, _ in events] == ["queued", "ok"]
    with stack.client("agent2") as http:
        assert http.get(f"/v1/calls/{found['call_id']}").json()["value"] == found["value"]


# -- gated calls and call_status -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_gated_call_answers_pending_and_call_status_gives_the_outcome_after_approval(
    stack: Stack, mode: str
) -> None:
    async def scenario() -> None:
        async with mcp_session(stack, mode=mode) as client:
            pending = await client.call_tool("high_echo", {"amount": 5})
            assert pending.is_error is False
            body = pending.structured_content
            assert body is not None
            assert body["status"] == "pending" and body["pending"] is True
            call_id, request_id = body["call_id"], body["request_id"]
            assert request_id.startswith("req-")
            assert request_id in text_of(pending) and STATUS_TOOL in text_of(pending)

            still = await client.call_tool(STATUS_TOOL, {"call_id": call_id})
            assert still.is_error is False
            assert still.structured_content is not None
            assert still.structured_content["status"] == "pending"

            await anyio.to_thread.run_sync(approve, stack, request_id)
            done = await client.call_tool(STATUS_TOOL, {"call_id": call_id, "wait_s": 30})
            assert done.is_error is False, text_of(done)
            assert done.structured_content is not None
            assert done.structured_content["status"] == "succeeded"
            assert done.structured_content["value"] == {"amount": 5}
            assert json.loads(text_of(done)) == {"amount": 5}
        events = audit_events(stack, call_id)
        assert events[:2] == [("pending", "agent"), ("approved", "approver")]
        assert [event for event, _ in events] == ["pending", "approved", "ok"]

    run(scenario)


def test_denied_call_is_an_error_result_from_call_status(stack: Stack) -> None:
    async def scenario() -> None:
        async with mcp_session(stack) as client:
            pending = await client.call_tool("high_echo", {"amount": 6})
            assert pending.structured_content is not None
            call_id = pending.structured_content["call_id"]
            request_id = pending.structured_content["request_id"]
            await anyio.to_thread.run_sync(approve, stack, request_id, "deny")
            denied = await client.call_tool(STATUS_TOOL, {"call_id": call_id, "wait_s": 10})
        assert denied.is_error is True
        assert text_of(denied) == f"call denied (request {request_id})"
        assert denied.structured_content is not None
        assert denied.structured_content["denied"] is True

    run(scenario)


def test_a_call_still_running_when_the_wait_ends_answers_with_its_id_then_its_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    # A second API process on the same database and Redis, waiting only 0.2 s per call.
    port = free_port()
    with (tmp_path / "api.log").open("wb") as log:
        api = subprocess.Popen(
            processes.api_argv(stack.settings, port=port),
            env={**stack.env, "TOOLROUTER_MCP_CALL_WAIT_S": "0.2"},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base_url}/healthz", api, (tmp_path / "api.log").read_text())

        async def scenario() -> None:
            short = Stack(env=stack.env, state_dir=stack.state_dir, base_url=base_url)
            short.keys = stack.keys
            async with mcp_session(short) as client:
                running = await client.call_tool("sleep", {"seconds": 1.5})
                assert running.is_error is False, text_of(running)
                body = running.structured_content
                assert body is not None and body["status"] in ("queued", "running")
                assert STATUS_TOOL in text_of(running) and body["call_id"] in text_of(running)
                done = await client.call_tool(
                    STATUS_TOOL, {"call_id": body["call_id"], "wait_s": 30}
                )
            assert done.is_error is False, text_of(done)
            assert done.structured_content is not None
            assert done.structured_content["value"] == 1.5

        run(scenario)
    finally:
        stop_group(api)


def test_every_waiting_status_renders_as_a_non_error_naming_the_status_tool() -> None:
    for status in ("queued", "running", "pending"):
        result = render(CallResult(status=status, tool="t", call_id="call_1", request_id="req-1"))
        assert result.is_error is False
        assert result.structured_content is not None
        assert result.structured_content["status"] == status
        assert STATUS_TOOL in text_of(result) and "call_1" in text_of(result)
    for status in ("denied", "expired", "cancelled"):
        assert render(CallResult(status=status, tool="t", call_id="call_1")).is_error is True


def test_a_lone_surrogate_in_a_value_is_replaced_not_sent_broken() -> None:
    result = render(CallResult(status="succeeded", tool="echo", call_id="c", value={"s": "\ud800"}))
    assert result.structured_content is not None
    assert result.structured_content["value"] == {"s": "?"}
    text_of(result).encode("utf-8")


def test_mcp_accepts_localhost_the_api_host_and_the_configured_hosts_only() -> None:
    settings = Settings(
        api_host="10.1.2.3", api_port=9000, mcp_allowed_hosts=" mcp.example.com, proxy:* ,"
    )
    security = transport_security(settings)
    assert security.enable_dns_rebinding_protection is True
    assert set(security.allowed_hosts) == {
        "127.0.0.1",
        "127.0.0.1:*",
        "localhost",
        "localhost:*",
        "[::1]",
        "[::1]:*",
        "10.1.2.3:9000",
        "mcp.example.com",
        "proxy:*",
        "proxy",
    }
    assert "https://mcp.example.com" in security.allowed_origins
    assert "http://localhost:*" in security.allowed_origins
    # "Any port" as the SDK checks it: the scheme's default port, left out, included.
    check = TransportSecurityMiddleware(security)
    for host in ("proxy", "proxy:443", "proxy:8080", "mcp.example.com"):
        assert check._validate_host(host), host
    for origin in ("https://proxy", "http://proxy:8080"):
        assert check._validate_origin(origin), origin
    assert not check._validate_host("proxy.evil:443") and not check._validate_host("mcp.evil")
    # Listening on every address names no host of its own.
    anywhere = transport_security(Settings(api_host="0.0.0.0"))
    assert not [host for host in anywhere.allowed_hosts if host.startswith("0.0.0.0")]


def test_call_status_answers_only_about_the_keys_own_calls(stack: Stack) -> None:
    async def scenario() -> None:
        async with mcp_session(stack) as client:
            mine = await client.call_tool("echo", {"n": 2})
        assert mine.structured_content is not None
        call_id = mine.structured_content["call_id"]
        async with mcp_session(stack, key="agent2") as client:
            theirs = await client.call_tool(STATUS_TOOL, {"call_id": call_id})
            made_up = await client.call_tool(STATUS_TOOL, {"call_id": "call_" + "0" * 32})
            bad_wait = await client.call_tool(STATUS_TOOL, {"call_id": call_id, "wait_s": -1})
            nul = await client.call_tool(STATUS_TOOL, {"call_id": "call_\x00"})
            extra = await client.call_tool(STATUS_TOOL, {"call_id": call_id, "zz": 1})
        assert extra.is_error is True and text_of(extra) == "unknown field: zz"
        assert theirs.is_error is True and text_of(theirs) == f"unknown call: {call_id}"
        assert made_up.is_error is True and text_of(made_up).startswith("unknown call: ")
        assert bad_wait.is_error is True and text_of(bad_wait).startswith("wait_s must be")
        assert nul.is_error is True and text_of(nul) == "unknown call: call_\\u0000"

    run(scenario)


# -- HTTP: keys, DNS rebinding, error bodies ------------------------------------------------


def json_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"ok", "error"} and body["ok"] is False, body
    assert "Traceback" not in body["error"]
    return str(body["error"])


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def test_mcp_without_a_valid_key_is_401_json(stack: Stack) -> None:
    url = f"{stack.base_url}/mcp"
    missing = httpx.post(url, json=INITIALIZE, headers=ACCEPT)
    assert json_error(missing, 401) == "missing bearer key"
    assert missing.headers["www-authenticate"] == "Bearer"
    bad = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": "Bearer nope"})
    assert json_error(bad, 401) == "invalid key"
    known = f"Bearer {stack.keys['agent']}"
    twice = httpx.Headers([*ACCEPT.items(), ("Authorization", known), ("Authorization", known)])
    assert json_error(httpx.post(url, json=INITIALIZE, headers=twice), 401) == (
        "more than one Authorization header"
    )

    async def scenario() -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            with pytest.raises(Exception) as raised:
                async with Client(streamable_http_client(url, http_client=http)):
                    pass
        # The client does not say why; the raw answers above do.
        assert "Server returned an error response" in repr(raised.value)

    run(scenario)


def test_a_foreign_host_or_origin_is_refused_even_with_a_valid_key(stack: Stack) -> None:
    url = f"{stack.base_url}/mcp"
    auth = {**ACCEPT, "Authorization": f"Bearer {stack.keys['agent']}"}
    host = httpx.post(url, json=INITIALIZE, headers={**auth, "Host": "evil.example:80"})
    assert json_error(host, 421) == "invalid Host header"
    origin = httpx.post(url, json=INITIALIZE, headers={**auth, "Origin": "http://evil.example"})
    assert json_error(origin, 403) == "invalid Origin header"
    # The same request from a local origin is served.
    port = stack.base_url.rsplit(":", 1)[1]
    local = httpx.post(url, json=INITIALIZE, headers={**auth, "Origin": f"http://localhost:{port}"})
    assert local.status_code == 200, local.text

    async def scenario() -> None:
        with pytest.raises(Exception) as raised:
            async with mcp_session(stack, Host="attacker.example"):
                pass
        # The client does not say why; the raw answers above do.
        assert "Server returned an error response" in repr(raised.value)

    run(scenario)


def test_sdk_refusals_are_json_errors_not_text_or_html(stack: Stack) -> None:
    url = f"{stack.base_url}/mcp"
    auth = {**ACCEPT, "Authorization": f"Bearer {stack.keys['agent']}"}
    wrong_type = httpx.post(url, content=b"hello", headers={**auth, "Content-Type": "text/plain"})
    assert json_error(wrong_type, 400) == "invalid Content-Type header"
    # Stateless: no event stream to open, no session to end.
    for method in ("GET", "DELETE"):
        response = httpx.request(method, url, headers=auth)
        assert json_error(response, 405) == "method not allowed: /mcp takes POST"
        assert response.headers["allow"] == "POST"
    not_json = httpx.post(
        url, content=b"{nope", headers={**auth, "Content-Type": "application/json"}
    )
    assert not_json.status_code < 500
    assert not_json.headers["content-type"].startswith("application/json")
    # JSON that is no JSON-RPC message: a short error of our own, not the validation
    # library's report (the input echoed back, a web address).
    for body in (b"[]", b"null", b"{}", b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}'):
        response = httpx.post(
            url, content=body, headers={**auth, "Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error == {"code": -32600, "message": NOT_JSON_RPC}, error


def test_a_request_whose_id_is_no_string_or_integer_is_refused_not_taken_for_a_notification(
    stack: Stack,
) -> None:
    url = f"{stack.base_url}/mcp"
    headers = {
        **ACCEPT,
        "Authorization": f"Bearer {stack.keys['agent']}",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    before = last_seq(stack)
    call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
    for bad in (None, True, 1.5, {}, [1]):
        response = httpx.post(url, json={**call, "id": bad}, headers=headers)
        assert response.status_code == 400, (bad, response.text)
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": BAD_REQUEST_ID},
        }
    # None of them reached the dispatcher: no call was queued or refused (rows of calls
    # from earlier tests that finish meanwhile do not count).
    trail = audit_trail(stack, after_seq=before, tool="echo")
    assert [event for event, _ in trail if event in ("queued", "invalid", "unknown")] == []
    # Nested past any parser's depth: a parse error, not a 500.
    for deep in (b"[" * 100_000, b'{"id": ' * 20_000):
        response = httpx.post(url, content=deep, headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == -32700
    # Ids that are strings or integers, and notifications without one, pass on to the SDK.
    for good in ("one", 7):
        response = httpx.post(
            url, json={"jsonrpc": "2.0", "id": good, "method": "ping"}, headers=headers
        )
        assert response.status_code == 200, response.text
        (answer,) = [
            json.loads(line.removeprefix("data:"))
            for line in response.text.splitlines()
            if line.startswith("data:") and line.removeprefix("data:").strip()
        ] or [response.json()]
        assert answer == {"jsonrpc": "2.0", "id": good, "result": {}}, answer
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(url, json=notification, headers=headers).status_code == 202


def rpc(stack: Stack, body: dict[str, Any], version: str) -> httpx.Response:
    headers = {
        **ACCEPT,
        "Authorization": f"Bearer {stack.keys['agent']}",
        "MCP-Protocol-Version": version,
    }
    return httpx.post(f"{stack.base_url}/mcp", json=body, headers=headers)


def answer_of(response: httpx.Response) -> Any:
    """The JSON-RPC answer, sent as JSON or as the one event of a stream."""
    events = [
        json.loads(line.removeprefix("data:"))
        for line in response.text.splitlines()
        if line.startswith("data:") and line.removeprefix("data:").strip()
    ]
    return events[0] if events else response.json()


def test_an_unknown_protocol_version_is_told_as_such_with_those_served(stack: Stack) -> None:
    """Not as a newer version's request missing its envelope, as the SDK would tell it."""
    for version in ("1.0", "2030-01-01"):
        response = rpc(stack, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, version)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == -32022, error
        assert error["message"].startswith(f"unsupported protocol version {version}: "), error
        assert "2025-06-18" in error["message"] and "_meta" not in error["message"]
        assert error["data"]["requested"] == version, error
        assert {"2025-06-18", "2026-07-28"} <= set(error["data"]["supported"]), error
    assert rpc(stack, INITIALIZE, "2025-06-18").status_code == 200


def test_a_cursor_for_tools_list_is_refused_and_tasks_are_offered_only_as_they_are(
    stack: Stack,
) -> None:
    """Every tool comes in one page: a cursor is none toolrouter gave. A version without
    tasks is not told to call tools as tasks without a word of the condition."""
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "x"}}
    refused = answer_of(rpc(stack, listed, "2025-06-18"))
    assert refused["error"] == {"code": -32602, "message": "invalid cursor"}, refused
    first = answer_of(rpc(stack, {**listed, "params": {}}, "2025-06-18"))
    assert "nextCursor" not in first["result"] and first["result"]["tools"], first
    started = answer_of(rpc(stack, INITIALIZE, "2025-06-18"))
    assert "tasks" not in started["result"]["capabilities"], started
    assert "where the tools offer it" in started["result"]["instructions"], started


def test_an_mcp_body_past_the_limit_is_413_json(stack: Stack) -> None:
    url = f"{stack.base_url}/mcp"
    headers = {**ACCEPT, "Authorization": f"Bearer {stack.keys['agent']}"}
    blob = "a" * (6 * stack.settings.max_args_bytes + 32 * 1024)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}
    body["params"]["arguments"] = {"blob": blob}

    def chunks() -> Iterator[bytes]:
        encoded = json.dumps(body).encode()
        for start in range(0, len(encoded), 64 * 1024):
            yield encoded[start : start + 64 * 1024]

    # Streamed without a length: the limit strikes while the endpoint reads ahead.
    streamed = httpx.post(
        url, content=chunks(), headers={**headers, "Content-Type": "application/json"}
    )
    assert json_error(streamed, 413).startswith("body is over the limit of")


# -- stdio --------------------------------------------------------------------------------


def stdio_params(stack: Stack, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "router.cli.main", "mcp", *args],
        env=stack.env,
        cwd=str(REPO),
    )


@pytest.mark.parametrize("mode", MODES)
def test_toolrouter_mcp_serves_the_same_tools_over_stdio(
    stack: Stack, tmp_path: Path, mode: str
) -> None:
    stderr = tmp_path / "stderr.log"

    async def scenario() -> None:
        with stderr.open("w") as errlog:
            params = stdio_params(stack, "--key", stack.keys["agent2"])
            async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                echoed = await client.call_tool("echo", {"over": "stdio"})
                gated = await client.call_tool("high_echo", {"over": "stdio"})
        assert {"echo", "high_echo", STATUS_TOOL} <= names, stderr.read_text()
        assert echoed.is_error is False, stderr.read_text()
        assert echoed.structured_content is not None
        assert echoed.structured_content["value"] == {"over": "stdio"}
        call_id = echoed.structured_content["call_id"]
        assert [event for event, _ in audit_events(stack, call_id)] == ["queued", "ok"]
        assert audit_events(stack, call_id)[0] == ("queued", "agent2")
        assert gated.is_error is False
        assert gated.structured_content is not None
        assert gated.structured_content["status"] == "pending"

    run(scenario)


def test_toolrouter_mcp_refuses_a_bad_key_before_serving(stack: Stack) -> None:
    env = {**stack.env, "TOOLROUTER_KEY": "trk_not-a-key"}
    done = subprocess.run(
        [sys.executable, "-m", "router.cli.main", "mcp"],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: invalid key"
    assert done.stdout == ""


def test_toolrouter_mcp_answers_every_request_piped_in_before_it_exits(stack: Stack) -> None:
    """A client that writes its requests and closes stdin at once (a pipe, a script) gets
    an answer to each, the slowest included, before the server exits."""
    done = piped_session(
        stack,
        [
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "sleep", "arguments": {"seconds": 1}},
            },
        ],
        version="2025-06-18",
    )
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    # Between the answers: the calls' log notifications (no id).
    answers = {message["id"]: message for message in messages if "id" in message}
    assert {message["method"] for message in messages if "id" not in message} <= {
        "notifications/message"
    }
    assert set(answers) == {1, 2, 3}, done.stdout
    assert all("result" in answer for answer in answers.values()), answers
    assert answers[3]["result"]["isError"] is False, answers[3]


def test_toolrouter_mcp_answers_a_line_it_cannot_read_with_an_error(stack: Stack) -> None:
    """A line that is no JSON, or no JSON-RPC message, gets an error with id null as over
    HTTP, not the silence a client would wait on forever; the session goes on."""
    deep = '{"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"x": '
    deep += "[" * 10_000 + "]" * 10_000 + "}}"
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    done = piped_session(stack, ["{nope", deep, "[]", ping], version="2025-11-25")
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    errors = [message["error"] for message in messages if message.get("id", 0) is None]
    assert [error["code"] for error in errors] == [-32700, -32700, -32600], done.stdout
    assert errors[0]["message"] == "Parse error: key must be a string at line 1 column 2"
    assert errors[1]["message"].startswith("Parse error: recursion limit exceeded")
    assert errors[2]["message"] == NOT_JSON_RPC
    assert {"jsonrpc": "2.0", "id": 2, "result": {}} in messages
