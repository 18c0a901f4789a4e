"""Handler adapters: one module per kind of tool (Python callable, HTTP endpoint, MCP tool).

Each adapter turns one run into an ``Outcome`` and never raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from router.context import CallContext
from router.tools.mcp_client import McpConnections
from router.tools.registry import Tool

from .http import run_http
from .mcp import run_mcp
from .outcome import Outcome
from .python import run_python


def invoke(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    *,
    mcp: McpConnections | None = None,
    max_nesting: int = 64,
    max_result_bytes: int | None = None,
    redact: Callable[[str], str] = str,
) -> Outcome:
    """Run ``tool``'s handler once, whatever its kind (MCP tools use ``mcp``'s sessions).
    A result nested deeper than ``max_nesting`` or larger than ``max_result_bytes`` (None:
    any size) fails the call. ``redact`` replaces config secrets in text a handler cuts to
    length (the caller replaces them in the rest)."""
    kind = tool.spec.handler.kind
    if kind == "http":
        return run_http(
            tool, args, ctx, max_nesting=max_nesting, max_bytes=max_result_bytes, redact=redact
        )
    if kind == "mcp":
        if mcp is None:
            return Outcome(
                ok=False, error="no MCP connections in this process", error_type="ConfigError"
            )
        return run_mcp(tool, args, ctx, mcp, max_nesting=max_nesting, max_bytes=max_result_bytes)
    return run_python(tool, args, ctx, max_nesting=max_nesting, max_bytes=max_result_bytes)


__all__ = ["Outcome", "invoke"]
