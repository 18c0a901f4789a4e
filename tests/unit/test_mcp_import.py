"""An MCP server's tools as tool specs: one whose schema cannot check anything is skipped,
so that one server's tool never stops the router from starting."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import types

from router.tools.mcp_import import spec_of
from router.tools.registry import build_tool

from ..support.receivers import accept
from ..support.scripted_http import ScriptedServer


def tool(name: str, input_schema: dict[str, Any]) -> types.Tool:
    return types.Tool(name=name, input_schema=input_schema)


def test_an_imported_tool_keeps_its_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"}}}
    spec = spec_of("files", tool("search", schema))
    assert spec is not None and spec.name == "files.search" and spec.input_schema == schema
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
    schema: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    assert spec_of("files", tool("search", schema)) is None
    assert "skipping MCP tool 'search' of files: invalid JSON Schema" in caplog.text


def test_arguments_that_reach_a_ref_nobody_can_resolve_are_refused_not_a_503() -> None:
    schema = {"type": "object", "properties": {"doc": {"$ref": "http://schemas.test/doc.json"}}}
    spec = spec_of("files", tool("store", schema))
    assert spec is not None
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
        assert spec is not None
        problem = build_tool(spec, file="t.yaml").argument_errors({"doc": {}})
        assert problem is not None and problem.startswith("cannot be checked"), problem
        assert server.seen == []
