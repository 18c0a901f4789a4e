"""MCP tool handlers: ``tools/call`` on the server's session in this worker process.

Structured content when the tool gives it, else its text; ``isError`` becomes an error
value with the tool's own text.
"""

from __future__ import annotations

from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from router.context import CallContext
from router.results import error_message
from router.tools import unreachable
from router.tools.mcp_client import McpConnections
from router.tools.registry import Tool

from .outcome import Outcome


def run_mcp(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    connections: McpConnections,
    *,
    max_nesting: int,
) -> Outcome:
    target = tool.spec.handler.mcp
    assert target is not None
    try:
        result = connections.call_tool(target.server, target.tool, args, tool.spec.timeout_s)
    except SoftTimeLimitExceeded:
        return Outcome.timed_out(tool.spec.timeout_s)
    except TimeoutError:
        return Outcome(
            ok=False,
            error=f"timeout after {tool.spec.timeout_s:g} s",
            error_type="TimeoutError",
            retryable=True,
        )
    except ConnectionError as exc:
        unreachable.report(f"MCP server {target.server}", error_message(exc))
        return Outcome(
            ok=False, error=error_message(exc), error_type="ConnectionError", retryable=True
        )
    except Exception as exc:
        return Outcome.of_exception(exc)
    text = "\n".join(part.text for part in result.content if getattr(part, "type", "") == "text")
    if result.is_error:
        return Outcome(
            ok=False, error=text or "MCP tool reported an error", error_type="McpToolError"
        )
    if result.structured_content is not None:
        return Outcome.of_value(result.structured_content, max_nesting=max_nesting)
    return Outcome.of_value(text, max_nesting=max_nesting)
