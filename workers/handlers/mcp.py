"""MCP tool handlers: ``tools/call`` on the server's session in this worker process.

The value is the structured content when the tool gives it, else its text; ``isError``
becomes an error value with the tool's own text. When the content is more than plain text
(an image, audio, a resource or link, annotations), every block also goes along as
``content``, in MCP's wire form, so nothing the tool answered is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel

from router.context import CallContext
from router.errors import AnswerTooLarge, CallLost
from router.results import error_message
from router.tools import unreachable
from router.tools.mcp_client import McpConnections
from router.tools.registry import Tool, is_idempotent

from .outcome import Outcome


def run_mcp(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    connections: McpConnections,
    *,
    max_nesting: int,
    max_bytes: int | None = None,
) -> Outcome:
    target = tool.spec.handler.mcp
    assert target is not None
    try:
        result = connections.call_tool(target.server, target.tool, args, tool.spec.timeout_s)
    except (SoftTimeLimitExceeded, TimeoutError):
        # Either limit, the call may be out: sent again, a non-idempotent tool could act twice.
        return Outcome.timed_out(tool.spec.timeout_s, retryable=is_idempotent(tool))
    except AnswerTooLarge as exc:
        return Outcome.too_large(max_bytes if max_bytes is not None else exc.limit_bytes)
    except ConnectionError as exc:
        unreachable.report(f"MCP server {target.server}", error_message(exc))
        return Outcome(
            ok=False,
            error=error_message(exc),
            error_type="ConnectionError",
            retryable=not isinstance(exc, CallLost) or is_idempotent(tool),
        )
    except Exception as exc:
        return Outcome.of_exception(exc)
    text = "\n".join(part.text for part in result.content if getattr(part, "type", "") == "text")
    if result.is_error:
        return Outcome(
            ok=False, error=text or "MCP tool reported an error", error_type="McpToolError"
        )
    value = text if result.structured_content is None else result.structured_content
    return Outcome.of_value(
        value, max_nesting=max_nesting, content=kept_content(result.content), max_bytes=max_bytes
    )


def wire_blocks(content: Sequence[Any]) -> list[dict[str, Any]]:
    """Content blocks as MCP sends them: camelCase, fields the server left out left out."""
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, BaseModel):
            blocks.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        elif isinstance(block, dict):
            blocks.append(block)
    return blocks


def kept_content(content: Sequence[Any]) -> list[dict[str, Any]] | None:
    """Every block, when any is more than plain text; None when the value says it all."""
    blocks = wire_blocks(content)
    if all(block.keys() == {"type", "text"} and block["type"] == "text" for block in blocks):
        return None
    return blocks
