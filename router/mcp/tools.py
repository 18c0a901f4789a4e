"""What MCP clients see: tool definitions from the registry, call results as tool results.

A tool's risk becomes its annotations (low: read-only; high: destructive). A call result
(SPEC §4) becomes a ``CallToolResult``: its structured content is the call result itself,
its text is the value as JSON (or the error), and ``isError`` is set exactly when the call
ended without a value. A result with ``content`` (an imported MCP tool's blocks: images,
audio, resources) answers with those blocks as they came instead of the text, and the
call result without them as structured content. A call that is still waiting (for
approval, or for a worker) is not an error: the answer names the call and how to fetch
its outcome with ``STATUS_TOOL``.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import types
from pydantic import TypeAdapter, ValidationError

from ..constants import MCP_STATUS_TOOL
from ..results import CallResult
from ..status import CallStatus
from ..tools.registry import Tool

STATUS_TOOL = MCP_STATUS_TOOL

# Extra facts about a tool, under the ``_meta`` of its definition (MCP reserves unprefixed keys).
META_RISK = "toolrouter/risk"
META_GATED = "toolrouter/requires_approval"

_BLOCKS: TypeAdapter[list[types.ContentBlock]] = TypeAdapter(list[types.ContentBlock])


# What the status tool takes: its schema's properties, and nothing else.
STATUS_FIELDS = frozenset({"call_id", "wait_s"})


def status_tool(max_wait_s: float) -> types.Tool:
    """The built-in tool that fetches the outcome of an earlier call of the same key."""
    return types.Tool(
        name=STATUS_TOOL,
        description=(
            "The outcome of one of your earlier toolrouter calls, e.g. one that waited for "
            "approval or was still running. Give its call_id; wait_s waits up to that many "
            "seconds for it to finish (default 0: answer at once)."
        ),
        input_schema={
            "type": "object",
            "required": ["call_id"],
            "properties": {
                "call_id": {"type": "string", "description": "The call_id of the earlier call"},
                "wait_s": {"type": "number", "minimum": 0, "maximum": max_wait_s},
            },
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    )


def mcp_tool(tool: Tool) -> types.Tool:
    """A registered tool as MCP lists it."""
    spec = tool.spec
    description = spec.description
    if spec.gated:
        note = (
            "Needs a human approval: the call answers with a pending request, and "
            f"{STATUS_TOOL} gives the outcome once an approver has decided."
        )
        description = f"{description} ({note})" if description else note
    return types.Tool(
        name=spec.name,
        description=description or None,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.risk == "low",
            destructive_hint=spec.risk == "high",
            idempotent_hint=spec.idempotent,
        ),
        _meta={META_RISK: spec.risk, META_GATED: spec.gated},
    )


def render(result: CallResult) -> types.CallToolResult:
    """One call result as the answer to ``tools/call`` (and to ``STATUS_TOOL``)."""
    body = wire_safe(result.to_dict())
    if result.ok:
        blocks = mcp_blocks(body.get("content"))
        if blocks:
            # The blocks go as they came; the structured content need not carry them twice.
            del body["content"]
            return types.CallToolResult(content=blocks, structured_content=body, is_error=False)
        return _answer(_json_text(body["value"]), body, error=False)
    if result.status in (CallStatus.PENDING, CallStatus.QUEUED, CallStatus.RUNNING):
        return _answer(_waiting_text(result), body, error=False)
    return _answer(failure_text(result), body, error=True)


def mcp_blocks(raw: Any) -> list[types.ContentBlock] | None:
    """Stored blocks (MCP's wire form) as the SDK's content types; None when there are
    none, or when they are not blocks any MCP client would take (then the call result,
    blocks included, is the structured content and nothing is lost)."""
    if not isinstance(raw, list):
        return None
    try:
        return _BLOCKS.validate_python(raw)
    except ValidationError:
        return None


def error_result(message: str) -> types.CallToolResult:
    """An error that is not about a call (no key, wrong role, bad status arguments)."""
    return _answer(message, {"ok": False, "error": message}, error=True)


def failure_text(result: CallResult) -> str:
    """The error of a call that ended without a value: the raiser's own message, if any."""
    if result.error:
        return result.error
    text = f"call {result.status}"
    if result.request_id is not None:
        text += f" (request {result.request_id})"
    return text


def _waiting_text(result: CallResult) -> str:
    fetch = f'{STATUS_TOOL} with {{"call_id": "{result.call_id}", "wait_s": 30}}'
    if result.status == CallStatus.PENDING:
        return (
            f"Awaiting approval: request {result.request_id} for call {result.call_id} "
            f"({result.tool}). The call runs only once an approver approves it; call "
            f"{fetch} to get its outcome."
        )
    return f"Call {result.call_id} ({result.tool}) is still {result.status}; call {fetch}."


def _answer(text: str, body: dict[str, Any], *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=body,
        is_error=error,
    )


def _json_text(value: Any) -> str:
    # A string is its own text: a client shows it to the model without JSON's quotes.
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def wire_safe(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with lone surrogates (which UTF-8 cannot carry) replaced, so a value echoed
    from hostile arguments cannot break the connection that carries the answer."""
    text = json.dumps(body, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        safe: dict[str, Any] = json.loads(text.encode("utf-8", "replace").decode("utf-8"))
        return safe
    return body
