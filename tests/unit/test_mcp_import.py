"""An MCP server's tools as tool specs: one whose schema cannot check anything is skipped,
so that one server's tool never stops the router from starting."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from router.errors import ConfigError
from router.tools.config import ToolSpec
from router.tools.mcp_client import McpConnections, StdioServer
from router.tools.mcp_import import (
    DESCRIPTION_CHARS,
    Imported,
    Skipped,
    import_mcp_tools,
    merge_imported,
    spec_of,
)
from router.tools.registry import build_tool

from ..support.receivers import accept
from ..support.scripted_http import ScriptedServer


def tool(name: str, input_schema: dict[str, Any]) -> types.Tool:
    return types.Tool(name=name, input_schema=input_schema)


def test_an_imported_tool_keeps_its_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"}}}
    spec = spec_of("files", tool("search", schema))
    assert isinstance(spec, ToolSpec)
    assert spec.name == "files.search" and spec.input_schema == schema
    assert build_tool(spec, file="t.yaml").validator.is_valid({"q": "aaa"})


@pytest.mark.parametrize(
    "schema",
    [
        # Valid in ECMAScript, which JSON Schema's patterns follow; not in Python's `re`.
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "(?<=a+)b"}}},
        {"type": "object", "properties": {"q": {"type": 12}}},
    ],
)
def test_an_imported_tool_whose_schema_cannot_check_anything_is_skipped(
    schema: dict[str, Any],
) -> None:
    skipped = spec_of("files", tool("search", schema))
    assert isinstance(skipped, Skipped) and skipped.why.startswith("invalid JSON Schema: ")


def test_a_schema_nested_past_checking_is_skipped_not_a_crash() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(160):
        deep = {"type": "array", "items": deep}
    skipped = spec_of("files", tool("search", {"type": "object", "properties": {"a": deep}}))
    assert isinstance(skipped, Skipped)
    assert skipped.why == "invalid JSON Schema: the schema nests too deeply to be checked"


def test_a_servers_long_description_is_cut() -> None:
    described = types.Tool(name="search", input_schema={"type": "object"}, description="x" * 10**6)
    spec = spec_of("files", described)
    assert isinstance(spec, ToolSpec)
    assert len(spec.description) == DESCRIPTION_CHARS and spec.description.endswith("…")


def test_configuring_a_skipped_tool_says_why_it_was_skipped() -> None:
    bad = {"type": "object", "properties": {"q": {"type": 12}}}
    skipped = spec_of("files", tool("search", bad))
    assert isinstance(skipped, Skipped)
    imported = Imported(skipped={"files.search": skipped})
    configured = ToolSpec.model_validate(
        {"name": "search", "handler": {"mcp": {"server": "files", "tool": "search"}}}
    )
    with pytest.raises(ConfigError) as raised:
        merge_imported([configured], imported, file="t.yaml")
    assert "mcp tool 'search' of 'files' was skipped: invalid JSON Schema: " in str(raised.value)
    with pytest.raises(ConfigError, match="mcp server 'files' offers no tool 'search'"):
        merge_imported([configured], Imported(), file="t.yaml")


def test_arguments_that_reach_a_ref_nobody_can_resolve_are_refused_not_a_503() -> None:
    schema = {"type": "object", "properties": {"doc": {"$ref": "http://schemas.test/doc.json"}}}
    spec = spec_of("files", tool("store", schema))
    assert isinstance(spec, ToolSpec)
    checked = build_tool(spec, file="t.yaml")
    assert checked.argument_errors({"other": 1}) is None
    assert checked.argument_errors({"doc": {}}) == (
        "cannot be checked: the tool's schema refers to "
        '"http://schemas.test/doc.json", which is not in it'
    )


def test_a_ref_to_an_address_is_never_fetched() -> None:
    """A schema an MCP server exports could name any address (a cloud's metadata service);
    validating arguments must not make the API request it."""
    with ScriptedServer(accept) as server:
        url = f"{server.url}/meta-data.json"
        schema = {"type": "object", "properties": {"doc": {"$ref": url}}}
        spec = spec_of("files", tool("store", schema))
        assert isinstance(spec, ToolSpec)
        problem = build_tool(spec, file="t.yaml").argument_errors({"doc": {}})
        assert problem is not None and problem.startswith("cannot be checked"), problem
        assert server.seen == []


# Answers initialize and lists the one tool named in its first argument.
LISTING_SERVER = r"""
import json, sys
for raw in sys.stdin:
    message = json.loads(raw)
    if "id" not in message:
        continue
    result = {}
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}
    elif message["method"] == "tools/list":
        result = {"tools": [{"name": sys.argv[1], "inputSchema": {"type": "object"}}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""


def test_two_servers_tools_that_would_share_a_name_are_both_skipped(tmp_path: Path) -> None:
    """Server "a" offering "b.c" and server "a.b" offering "c" both make "a.b.c": a call
    by that name must not reach whichever listed last."""
    servers = {
        "a": StdioServer(command=sys.executable, args=("-c", LISTING_SERVER, "b.c")),
        "a.b": StdioServer(command=sys.executable, args=("-c", LISTING_SERVER, "c")),
        "d": StdioServer(command=sys.executable, args=("-c", LISTING_SERVER, "e")),
    }
    connections = McpConnections(servers, log_dir=tmp_path)
    try:
        imported = import_mcp_tools(connections, file="t.yaml")
    finally:
        connections.close()
    assert sorted(imported.specs) == ["d.e"]
    assert imported.skipped["a.b.c"].why == (
        "two MCP tools would be named a.b.c: 'b.c' of a and 'c' of a.b; neither is served"
    )
