"""An MCP server whose tool list holds a tool the MCP SDK cannot read (no ``inputSchema``,
one without ``type``, a name that is no string): that tool is left out, named and why in
one line, and the server's other tools are imported and called as ever."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.client import session as sdk_session

from router.errors import ConfigError, ToolListUnreadable
from router.tools.mcp_import import import_mcp_tools
from router.tools.mcp_tool_list import readable_tools

from ..support.raw_mcp import answer_with, connected, raw_mcp

GOOD = {
    "name": "good",
    "inputSchema": {"type": "object"},
    "outputSchema": {"type": "object", "required": ["n"]},
}
UNREADABLE = [
    ({"name": "untyped", "inputSchema": {"properties": {}}}, "untyped", "inputSchema.type"),
    ({"name": "bare"}, "bare", "inputSchema"),
    ({"name": 5, "inputSchema": {"type": "object"}}, "#2", "name"),
]


def structured(n: int) -> bytes:
    return b'{"content": [], "structuredContent": {"n": %d}}' % n


@pytest.mark.parametrize(("tool", "named", "where"), UNREADABLE, ids=["untyped", "bare", "name"])
def test_a_tool_the_sdk_cannot_read_is_skipped_and_the_others_work(
    tool: dict[str, Any], named: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    handler = raw_mcp(lambda cursor: {"tools": [GOOD, tool]}, answer_with(structured(7)))
    with connected(handler) as connections:
        imported = import_mcp_tools(connections, file="t.yaml")
        assert list(imported.specs) == ["paging.good"]
        why = imported.skipped[f"paging.{named}"].why
        assert why.startswith(f"the MCP SDK cannot read it: {where}: "), why
        assert "\n" not in why and "pydantic" not in why
        # The output schema was taken from the list read tool by tool: the call is checked
        # against it, not sent to list the tools again (which would fail as before).
        pages = handler.pages  # type: ignore[attr-defined]
        answer = connections.call_tool("paging", "good", {}, timeout=10)
        assert answer.structured_content == {"n": 7}
        assert handler.pages == pages  # type: ignore[attr-defined]
    assert f"skipping MCP tool {named!r} of paging: the MCP SDK cannot read it" in caplog.text


def test_a_call_breaking_the_output_schema_of_a_tool_beside_an_unreadable_one_fails() -> None:
    handler = raw_mcp(
        lambda cursor: {"tools": [GOOD, UNREADABLE[0][0]]},
        answer_with(b'{"content": [], "structuredContent": {}}'),
    )
    with connected(handler) as connections:
        import_mcp_tools(connections, file="t.yaml")
        with pytest.raises(RuntimeError, match="Invalid structured content returned by tool good"):
            connections.call_tool("paging", "good", {}, timeout=10)


def test_unreadable_tools_on_later_pages_are_named_and_counted() -> None:
    def pages(cursor: str | None) -> dict[str, Any]:
        if cursor is None:
            return {"tools": [GOOD], "nextCursor": "2"}
        return {"tools": [{"name": "late"}, {"name": "fine", "inputSchema": {"type": "object"}}]}

    with connected(raw_mcp(pages)) as connections:
        imported = import_mcp_tools(connections, file="t.yaml")
    assert sorted(imported.specs) == ["paging.fine", "paging.good"]
    assert list(imported.skipped) == ["paging.late"]


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        ({"tools": "all of them"}, "sends a tool list page whose tools are not a list"),
        (
            {"tools": [GOOD, {"name": "bare"}], "nextCursor": 5},
            "sends a tool list page the SDK cannot read:"
            " nextCursor: Input should be a valid string",
        ),
    ],
    ids=["tools-not-a-list", "cursor-not-a-string"],
)
def test_a_page_that_is_no_tool_list_stops_the_import_in_one_line(
    page: dict[str, Any], reason: str
) -> None:
    with (
        connected(raw_mcp(lambda cursor: page)) as connections,
        pytest.raises(ConfigError) as raised,
    ):
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == f"mcp server 'paging' {reason}"


def test_an_sdk_that_cannot_read_a_list_tool_by_tool_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The private members the page is read again with may be gone in another SDK: the
    list is refused as the SDK refused it, never reported as a server out of reach."""
    monkeypatch.delattr(sdk_session.ClientSession, "_absorb_tool_listing")
    handler = raw_mcp(lambda cursor: {"tools": [GOOD, {"name": "bare"}]})
    with connected(handler) as connections, pytest.raises(ConfigError) as raised:
        import_mcp_tools(connections, file="t.yaml")
    assert raised.value.reason == (
        "mcp server 'paging' sends a tool the MCP SDK cannot read (inputSchema: Field"
        " required), and this version of the SDK cannot read the list tool by tool"
    )


def test_a_process_that_calls_without_importing_reads_the_list_as_the_import_does() -> None:
    """A worker's session, or one opened again after its server restarted, has listed
    nothing: the SDK would list the tools on the call's first result, and fail."""
    handler = raw_mcp(
        lambda cursor: {"tools": [GOOD, {"name": "bare"}]}, answer_with(structured(3))
    )
    with connected(handler) as connections:
        assert connections.call_tool("paging", "good", {}, timeout=10).structured_content == {
            "n": 3
        }
        assert connections.call_tool("paging", "good", {}, timeout=10).structured_content == {
            "n": 3
        }
    assert handler.pages == 2  # type: ignore[attr-defined]


MODERN = "2026-07-28"
MODERN_PAGE = {"cacheScope": "public", "resultType": "complete", "ttlMs": -5}


def test_a_modern_page_keeps_its_readable_tools() -> None:
    """At 2026-07-28 a page carries its own cache fields: each tool is read within them,
    or every tool would fail for the page's fields, the good ones too."""
    raw = {**MODERN_PAGE, "tools": [GOOD, {"name": "bare"}]}
    page, unreadable = readable_tools(raw, MODERN, first_place=1)
    assert [tool["name"] for tool in page["tools"]] == ["good"]
    assert unreadable == {"bare": "inputSchema: Field required"}
    assert page["ttlMs"] == 0  # floored, as the SDK takes it


def test_an_older_session_drops_a_later_revisions_fields_as_the_sdk_does() -> None:
    raw = {"cacheScope": "nobody", "ttlMs": -5, "tools": [GOOD, {"name": "bare"}]}
    page, unreadable = readable_tools(raw, "2025-11-25", first_place=4)
    assert [tool["name"] for tool in page["tools"]] == ["good"] and list(unreadable) == ["bare"]
    assert "cacheScope" not in page and "ttlMs" not in page


def test_a_modern_page_without_its_own_fields_is_no_tool_list() -> None:
    with pytest.raises(ToolListUnreadable) as raised:
        readable_tools({"tools": [GOOD]}, MODERN, first_place=1)
    assert str(raised.value) == (
        "sends a tool list page the SDK cannot read: cacheScope: Field required (and 2 more)"
    )
