"""What imported MCP tools answer beyond text (images, audio, embedded resources, resource
links, annotations, structured content) reaches the caller intact: over ``/v1/calls`` as
the call result's ``content``, and over toolrouter's own ``/mcp`` as the content blocks
themselves. The reference server is asked directly, over its own stdio, for what intact
means; a server of the tests' own (the official SDK) answers with what it lacks (audio).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import types

from ..fixture_mcp_server import PNG, wav
from ..support.launcher import REPO
from ..support.stack import Stack, own_stack
from .test_mcp_server import mcp_session, run
from .test_mcp_tools import MCP_BIN, need_mcp_servers

CONFIG = REPO / "tests" / "mcp_content.yaml"
REDIS_DB = 10
EVERYTHING = [str(MCP_BIN / "mcp-server-everything"), "stdio"]


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    need_mcp_servers()
    state_dir = tmp_path_factory.mktemp("mcp-content")
    with own_stack(
        state_dir,
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"]},
        TOOLROUTER_CONFIG=str(CONFIG),
        MCP_BIN=str(MCP_BIN),
        PYTHON=sys.executable,
        REPO=str(REPO),
    ) as stack:
        stack.start_api()
        stack.start_worker(concurrency=1)
        yield stack


def raw_call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The reference server's own ``tools/call`` result, as the JSON it writes: no SDK
    between it and the test."""
    lines: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": tool, "arguments": args},
        },
    ]
    with subprocess.Popen(
        EVERYTHING, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        try:
            for line in lines:
                server.stdin.write(json.dumps(line).encode() + b"\n")
                server.stdin.flush()
                if "id" in line:
                    while (answer := json.loads(server.stdout.readline())).get("id") != line["id"]:
                        pass
        finally:
            server.kill()
    result: dict[str, Any] = answer["result"]
    return result


def call(stack: Stack, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with stack.client() as http:
        body: dict[str, Any] = http.post(
            "/v1/calls", json={"tool": tool, "args": args, "wait_s": 30}
        ).json()
    assert body["status"] == "succeeded", body
    return body


def fetched(stack: Stack, call_id: str) -> dict[str, Any]:
    with stack.client() as http:
        body: dict[str, Any] = http.get(f"/v1/calls/{call_id}").json()
    return body


def texts(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(block["text"] for block in blocks if block["type"] == "text")


def wire(blocks: list[types.ContentBlock]) -> list[dict[str, Any]]:
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks]


# -- over /v1/calls -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get-tiny-image", {}),
        ("get-annotated-message", {"messageType": "success", "includeImage": True}),
        ("get-annotated-message", {"messageType": "debug", "includeImage": False}),
        ("get-resource-links", {"count": 3}),
    ],
    ids=["image", "annotated-with-image", "annotated-text", "resource-links"],
)
def test_an_mcp_tools_blocks_arrive_as_the_server_sent_them(
    stack: Stack, tool: str, args: dict[str, Any]
) -> None:
    sent = raw_call(tool, args)["content"]
    assert any(block["type"] != "text" or "annotations" in block for block in sent)
    answer = call(stack, f"everything.{tool}", args)
    # The value is what it always was (the text); the blocks come beside it, whole.
    assert answer["value"] == texts(sent)
    assert answer["content"] == sent
    assert fetched(stack, answer["call_id"]) == answer


@pytest.mark.parametrize("kind", ["Text", "Blob"])
def test_an_embedded_resource_arrives_whole(stack: Stack, kind: str) -> None:
    args = {"resourceType": kind, "resourceId": 2}
    sent = raw_call("get-resource-reference", args)["content"]
    answer = call(stack, "everything.get-resource-reference", args)
    assert [block["type"] for block in answer["content"]] == ["text", "resource", "text"]
    resource = answer["content"][1]["resource"]
    # The resource's text tells the time it was made: the rest must match to the byte.
    assert {k: v for k, v in resource.items() if k not in ("text", "blob")} == {
        k: v for k, v in sent[1]["resource"].items() if k not in ("text", "blob")
    }
    if kind == "Text":
        assert resource["text"].startswith("Resource 2: This is a plaintext resource created")
    else:
        decoded = base64.b64decode(resource["blob"], validate=True)
        assert decoded.startswith(b"Resource 2: This is a base64 blob created at")
    assert answer["value"] == texts(answer["content"])


def test_structured_content_stays_the_value_and_text_alone_adds_no_content(stack: Stack) -> None:
    args = {"location": "Chicago"}
    sent = raw_call("get-structured-content", args)
    answer = call(stack, "everything.get-structured-content", args)
    assert answer["value"] == sent["structuredContent"]
    assert "content" not in answer
    assert "content" not in call(stack, "everything.echo", {"message": "hi"})


def test_audio_and_structured_content_arrive_together(stack: Stack) -> None:
    answer = call(stack, "media.beep", {"frames": 80})
    assert answer["value"] == {"frames": 80, "rate": 8000}
    assert answer["content"] == [
        {"type": "text", "text": "a short beep"},
        {"type": "audio", "data": wav(80), "mimeType": "audio/wav"},
    ]


def test_content_too_large_to_ride_the_notification_is_read_from_the_database(
    stack: Stack,
) -> None:
    answer = call(stack, "media.beep", {"frames": 100_000})
    assert answer["content"][1]["data"] == wav(100_000)
    assert len(answer["content"][1]["data"]) > 100_000


def test_content_nested_past_the_limit_fails_the_call_with_nothing_half_stored(
    stack: Stack,
) -> None:
    with stack.client() as http:
        answer = http.post(
            "/v1/calls", json={"tool": "media.nested_meta", "args": {"depth": 80}, "wait_s": 30}
        ).json()
    assert answer == {
        "ok": False,
        "call_id": answer["call_id"],
        "tool": "media.nested_meta",
        "status": "failed",
        "error": "result nested deeper than the limit of 64 levels",
        "error_type": "ResultTooDeep",
    }
    assert fetched(stack, answer["call_id"]) == answer
    assert call(stack, "media.nested_meta", {"depth": 3})["content"] == [
        {"type": "text", "text": "deep", "_meta": {"nest": [[["bottom"]]]}}
    ]


def test_an_mcp_error_stays_its_text(stack: Stack) -> None:
    with stack.client() as http:
        answer = http.post(
            "/v1/calls", json={"tool": "media.broken_chart", "args": {}, "wait_s": 30}
        ).json()
    assert (answer["status"], answer["error"], answer["error_type"]) == (
        "failed",
        "the chart could not be drawn",
        "McpToolError",
    )
    assert "content" not in answer


def test_a_cached_tool_with_content_is_not_answered_from_the_cache(stack: Stack) -> None:
    first = call(stack, "media.chart", {})
    second = call(stack, "media.chart", {})
    assert first["call_id"] != second["call_id"]
    chart = [
        {"type": "text", "text": "the chart"},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
    ]
    assert first["content"] == second["content"] == chart


# -- over toolrouter's own /mcp -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_over_mcp_the_blocks_are_the_answer_and_the_call_result_its_structure(
    stack: Stack, mode: str
) -> None:
    sent = raw_call("get-tiny-image", {})["content"]

    async def scenario() -> None:
        async with mcp_session(stack, mode=mode) as client:
            answer = await client.call_tool("everything.get-tiny-image", {})
            again = await client.call_tool(
                "toolrouter.call_status", {"call_id": answer.structured_content["call_id"]}
            )
        assert answer.is_error is False
        assert wire(answer.content) == sent
        structured = answer.structured_content
        assert structured["status"] == "succeeded" and structured["ok"] is True
        assert structured["value"] == texts(sent)
        assert "content" not in structured
        assert wire(again.content) == sent and again.structured_content == structured

    run(scenario)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("everything.get-resource-links", {"count": 2}),
        ("everything.get-annotated-message", {"messageType": "error", "includeImage": True}),
    ],
    ids=["resource-links", "annotated"],
)
def test_over_mcp_links_and_annotations_arrive_as_sent(
    stack: Stack, tool: str, args: dict[str, Any]
) -> None:
    sent = raw_call(tool.removeprefix("everything."), args)["content"]

    async def scenario() -> None:
        async with mcp_session(stack) as client:
            answer = await client.call_tool(tool, args)
        assert wire(answer.content) == sent

    run(scenario)


def test_over_mcp_audio_and_embedded_resources_arrive(stack: Stack) -> None:
    async def scenario() -> None:
        async with mcp_session(stack) as client:
            beep = await client.call_tool("media.beep", {"frames": 8})
            reference = await client.call_tool(
                "everything.get-resource-reference", {"resourceType": "Blob", "resourceId": 1}
            )
        text, audio = beep.content
        assert isinstance(text, types.TextContent) and text.text == "a short beep"
        assert isinstance(audio, types.AudioContent)
        assert (audio.data, audio.mime_type) == (wav(8), "audio/wav")
        assert beep.structured_content["value"] == {"frames": 8, "rate": 8000}
        embedded = reference.content[1]
        assert isinstance(embedded, types.EmbeddedResource)
        assert isinstance(embedded.resource, types.BlobResourceContents)
        assert embedded.resource.uri == "demo://resource/dynamic/blob/1"
        assert base64.b64decode(embedded.resource.blob).startswith(b"Resource 1: ")

    run(scenario)


def test_over_mcp_structured_content_without_blocks_answers_as_before(stack: Stack) -> None:
    sent = raw_call("get-structured-content", {"location": "New York"})

    async def scenario() -> None:
        async with mcp_session(stack) as client:
            answer = await client.call_tool(
                "everything.get-structured-content", {"location": "New York"}
            )
        (only,) = answer.content
        assert isinstance(only, types.TextContent)
        assert json.loads(only.text) == sent["structuredContent"]
        assert answer.structured_content["value"] == sent["structuredContent"]

    run(scenario)
