"""A call's answer that is not an MCP result, told in one line by the SDK's own validation
at each protocol version: on the newest, a call's result may also be an input request, and
pydantic names that union's member first."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types.methods import validate_server_result
from pydantic import ValidationError

from router.tools.mcp_unreadable import not_an_mcp_result

VERSIONS = ["2025-06-18", "2026-07-28"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (
            {"content": [{"type": "video", "url": "x"}]},
            "content.0: a content block of type 'video', none MCP defines",
        ),
        (
            {"content": [{"type": "video", "text": "hi"}]},
            "content.0: a content block of type 'video', none MCP defines",
        ),
        (
            {"content": [{"type": "text", "text": "a"}, {"kind": "text"}]},
            "content.1: a content block of no type, none MCP defines",
        ),
        ({"content": [{"type": "text"}]}, "content.0 (TextContent): text: Field required"),
        ({"content": ["x"]}, "content.0: a content block that is not a JSON object"),
        ({"content": "x"}, "content: Input should be a valid list"),
        ([], "result: Input should be a valid dictionary or instance of CallToolResult"),
    ],
)
def test_a_result_that_is_not_an_mcp_result_is_told_in_one_line(
    version: str, result: Any, reason: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        validate_server_result("tools/call", version, result)
    error = not_an_mcp_result("s", raised.value)
    assert str(error) == f"MCP server s answered with no MCP result: {reason}"
