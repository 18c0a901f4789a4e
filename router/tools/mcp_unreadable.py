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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.client.session import IncomingMessage, MessageHandlerFnT

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
