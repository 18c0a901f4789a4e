"""Messages from an MCP server that are not JSON-RPC (not JSON, nested past the parser's
limit, a number out of range). The SDK logs and drops them; one may have been a call's
answer, which then never comes, so the calls waiting are told of it and fail at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.client.session import IncomingMessage, MessageHandlerFnT


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
