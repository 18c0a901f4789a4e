"""Messages from an MCP server that are not JSON-RPC (not JSON, nested past the parser's
limit, a number out of range). The SDK logs and drops them; one may have been a call's
answer, which then never comes, so the calls waiting are told of it and fail at once.
An answer over HTTP that is JSON the SDK hands on as a JSON-RPC error instead, whose text
is pydantic's report: ``refused_reason`` reads it, for toolrouter's server as for its client.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING, Any

from ..errors import McpProtocolError

if TYPE_CHECKING:
    from mcp.client.session import IncomingMessage, MessageHandlerFnT
    from pydantic import ValidationError

# How the SDK words a message its validation refused: as a server answering it, and as a
# client reading an HTTP answer that is JSON.
REFUSED_PREFIXES = ("Validation error: ", "Failed to parse JSON response: ")
# pydantic's report: a title line, a location line for a field, then the first error's text
# before its ``[type=…, input_value=…]`` (which quotes the message).
_FIRST_ERROR = re.compile(
    r"\d+ validation errors? for [^\n]*\n(?:\S[^\n]*\n)?  ([^\n]*?)(?: \[type=|$)", re.M
)


def watch_unreadable(waiting_calls: set[asyncio.Future[Exception]]) -> MessageHandlerFnT:
    """A client's message handler that tells each of ``waiting_calls`` (one future per call
    out) of a message the transport could not read."""

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            for waiting in waiting_calls:
                if not waiting.done():
                    waiting.set_result(message)

    return on_message


def unreadable_reason(exc: Exception) -> str:
    """What was wrong with the message, in one line (pydantic's first error, not its
    multi-line report quoting the message)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            return str(errors()[0]["msg"])
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def refused_reason(message: str) -> str | None:
    """The first error, in one line, when ``message`` is the SDK's report of a message its
    validation refused (the report quotes the message and links to pydantic's site); None
    for any other text."""
    prefix = next((prefix for prefix in REFUSED_PREFIXES if message.startswith(prefix)), None)
    if prefix is None:
        return None
    # Matched where the report starts, never searched for: the text may be a server's own.
    found = _FIRST_ERROR.match(message, len(prefix))
    return found[1][:200] if found else "not a valid JSON-RPC message"


def not_an_mcp_result(server: str, exc: ValidationError) -> McpProtocolError:
    """The error of a call whose answer holds no MCP result, in one line."""
    return McpProtocolError(f"MCP server {server} answered with no MCP result: {_reason(exc)}")


def _reason(exc: ValidationError) -> str:
    """What was wrong with a JSON-RPC answer whose result is not the MCP result it answers,
    in one line. A content block fails against each type of the union, each failure its
    own error: it is told by the type its ``type`` names, else as of no type MCP defines."""
    errors = exc.errors(include_url=False)
    loc = errors[0]["loc"]
    # The union's members appear in the location by their class names.
    at = next((i for i, part in enumerate(loc) if str(part)[:1].isupper()), None)
    if at is None:
        return f"{'.'.join(map(str, loc)) or 'result'}: {errors[0]['msg']}"[:200]
    where, block = ".".join(map(str, loc[:at])), errors[0]["input"]
    failed: dict[str, list[Any]] = {}
    for error in errors:
        if error["loc"][:at] == loc[:at] and len(error["loc"]) > at:
            failed.setdefault(str(error["loc"][at]), []).append(error)
    for member, its_errors in failed.items():
        if all(error["loc"][at + 1 :] not in ((), ("type",)) for error in its_errors):
            field = ".".join(map(str, its_errors[0]["loc"][at + 1 :]))
            return f"{where} ({member}): {field}: {its_errors[0]['msg']}"[:200]
    if not isinstance(block, dict):
        return f"{where}: a content block that is not a JSON object"
    given = block.get("type")
    kind = "no type" if given is None else f"type {str(given)[:40]!r}"
    return f"{where}: a content block of {kind}, none MCP defines"
