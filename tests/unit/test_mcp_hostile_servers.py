"""MCP servers that answer what they should not, as toolrouter's client reads them: a tool
list that never ends, a call's answer that is not JSON-RPC. Each fails in one line naming
the cause, and costs the importing process no more than a limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from router.errors import ConfigError, McpProtocolError
from router.tools import mcp_tool_list
from router.tools.mcp_import import import_mcp_tools

from ..support.raw_mcp import Streamed, answer_with, connected, raw_mcp


def tools(first: int, count: int) -> list[dict[str, Any]]:
    schema = {"type": "object"}
    return [{"name": f"t{n}", "inputSchema": schema} for n in range(first, first + count)]


def endless(cursor: str | None) -> dict[str, Any]:
    """Two thousand tools a page, and always a next page."""
    page = int(cursor or "0")
    return {"tools": tools(page * 2000, 2000), "nextCursor": str(page + 1)}


def test_a_tool_list_that_never_ends_stops_at_the_limit_and_says_so() -> None:
    handler = raw_mcp(endless)
    with connected(handler) as connections, pytest.raises(ConfigError) as raised:
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == "mcp server 'paging' lists more than 10000 tools"
    assert handler.pages == 6  # type: ignore[attr-defined]


def test_a_tool_list_that_repeats_a_cursor_stops_at_once() -> None:
    handler = raw_mcp(lambda cursor: {"tools": tools(0, 1), "nextCursor": "again"})
    with connected(handler) as connections, pytest.raises(ConfigError) as raised:
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == "mcp server 'paging' repeats a cursor of its tool list"
    assert handler.pages == 2  # type: ignore[attr-defined]


def test_a_tool_list_in_a_message_over_the_answer_limit_is_named_as_such() -> None:
    """The server answered: at a greater length than is read, not by closing."""
    handler = raw_mcp(lambda cursor: {"tools": tools(0, 200)})
    with (
        connected(handler, max_answer_bytes=4096) as connections,
        pytest.raises(ConfigError) as raised,
    ):
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == (
        "mcp server 'paging' sends its tool list in a message over 4096 bytes"
        " (4 x TOOLROUTER_MAX_RESULT_BYTES)"
    )


def test_a_tool_list_of_empty_pages_stops_at_the_page_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcp_tool_list, "MAX_LISTED_PAGES", 5)
    handler = raw_mcp(lambda cursor: {"tools": [], "nextCursor": f"{cursor}x"})
    with connected(handler) as connections, pytest.raises(ConfigError) as raised:
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == "mcp server 'paging' lists its tools on more than 5 pages"
    assert handler.pages == 5  # type: ignore[attr-defined]


def test_a_tool_list_of_more_bytes_than_the_limit_stops_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each page under the answer limit, the pages together over the list's."""
    monkeypatch.setattr(mcp_tool_list, "MAX_LISTED_BYTES", 200_000)

    def wordy(cursor: str | None) -> dict[str, Any]:
        page = int(cursor or "0")
        listed = [{**tool, "description": "d" * 10_000} for tool in tools(page * 5, 5)]
        return {"tools": listed, "nextCursor": str(page + 1)}

    handler = raw_mcp(wordy)
    with connected(handler) as connections, pytest.raises(ConfigError) as raised:
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == (
        "mcp server 'paging' lists tools of more than 200000 bytes in all"
    )
    assert handler.pages == 4  # type: ignore[attr-defined]


def test_a_tool_list_at_the_limit_is_imported_whole() -> None:
    def two_pages(cursor: str | None) -> dict[str, Any]:
        return (
            {"tools": tools(0, 5000), "nextCursor": "2"}
            if cursor is None
            else {"tools": tools(5000, 5000)}
        )

    with connected(raw_mcp(two_pages)) as connections:
        imported = import_mcp_tools(connections, file="t.yaml")
    assert len(imported.specs) == 10_000 and not imported.skipped


def one_tool(cursor: str | None) -> dict[str, Any]:
    return {"tools": tools(0, 1)}


def first_bad_then_fine(result: bytes) -> Callable[[dict[str, Any]], bytes | Streamed]:
    """Calls answered ``result`` first, then a good answer: the session outlives the bad."""
    called = 0

    def answer(message: dict[str, Any]) -> bytes | Streamed:
        nonlocal called
        called += 1
        good = b'{"content": [{"type": "text", "text": "fine"}]}'
        return answer_with(result if called == 1 else good)(message)

    return answer


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (b'{"content": [{"type": "text", "text": "\xff\xfe"}]}', "invalid unicode code point"),
        (
            b'{"content": [], "structuredContent": %s}' % (b'{"a": ' * 5000 + b"1" + b"}" * 5000),
            "recursion limit exceeded",
        ),
    ],
    ids=["not-utf8", "nested"],
)
def test_an_answer_over_http_that_is_not_json_rpc_fails_as_such_in_one_line(
    result: bytes, reason: str
) -> None:
    with connected(raw_mcp(one_tool, first_bad_then_fine(result))) as connections:
        with pytest.raises(McpProtocolError) as raised:
            connections.call_tool("paging", "t0", {}, timeout=10)
        message = str(raised.value)
        assert message.startswith(
            f"MCP server paging sent a message that is not JSON-RPC: Invalid JSON: {reason} at "
        ), message
        assert "\n" not in message and "pydantic" not in message and "input_value" not in message
        # The session goes on: the answer was read whole, only not understood.
        assert connections.call_tool("paging", "t0", {}, timeout=10).content[0].text == "fine"


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (
            b'{"content": [{"type": "video", "url": "x"}]}',
            "content.0: a content block of type 'video', none MCP defines",
        ),
        (
            b'{"content": [{"kind": "text"}]}',
            "content.0: a content block of no type, none MCP defines",
        ),
        (b'{"content": [{"type": "text"}]}', "content.0 (TextContent): text: Field required"),
        (b'{"content": ["x"]}', "content.0: a content block that is not a JSON object"),
        (b'{"content": "x"}', "content: Input should be a valid list"),
    ],
    ids=["unknown-type", "no-type", "missing-field", "not-an-object", "not-a-list"],
)
def test_a_result_that_is_not_an_mcp_result_fails_in_one_line_naming_the_block(
    result: bytes, reason: str
) -> None:
    """Not pydantic's report of each content type the block is not, one error each."""
    with connected(raw_mcp(one_tool, first_bad_then_fine(result))) as connections:
        with pytest.raises(McpProtocolError) as raised:
            connections.call_tool("paging", "t0", {}, timeout=10)
        assert str(raised.value) == f"MCP server paging answered with no MCP result: {reason}"
        assert connections.call_tool("paging", "t0", {}, timeout=10).content[0].text == "fine"
