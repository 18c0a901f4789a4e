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
    errors = [_within_result(error) for error in exc.errors(include_url=False)]
    loc = errors[0]["loc"]
    # A block's location is its list's, its index, then the union's member by class name.
    at = next(
        (i for i in range(1, len(loc)) if isinstance(loc[i - 1], int) and _is_member(loc[i])),
        None,
    )
    if at is None:
        return f"{'.'.join(map(str, loc)) or 'result'}: {errors[0]['msg']}"[:200]
    where = ".".join(map(str, loc[:at]))
    failed: dict[str, list[Any]] = {}
    for error in errors:
        if error["loc"][:at] == loc[:at] and len(error["loc"]) > at:
            failed.setdefault(str(error["loc"][at]), []).append(error)
    every = [error for its_errors in failed.values() for error in its_errors]
    if any(len(error["loc"]) == at + 1 for error in every):
        return f"{where}: a content block that is not a JSON object"
    for member, its_errors in failed.items():
        if all(error["loc"][at + 1 :] != ("type",) for error in its_errors):
            field = ".".join(map(str, its_errors[0]["loc"][at + 1 :]))
            return f"{where} ({member}): {field}: {its_errors[0]['msg']}"[:200]
    # Each member refused the block's ``type``: that error's input is the type it gave.
    given = next(
        (e["input"] for e in every if e["loc"][at + 1 :] == ("type",) and e["type"] != "missing"),
        None,
    )
    kind = "no type" if given is None else f"type {str(given)[:40]!r}"
    return f"{where}: a content block of {kind}, none MCP defines"


def _is_member(part: object) -> bool:
    return isinstance(part, str) and part[:1].isupper()


def _within_result(error: Any) -> Any:
    """The error with its location inside the result: a protocol version whose result may
    be one of several types (a call's result or an input request) names that type first."""
    loc = error["loc"]
    return {**error, "loc": loc[1:]} if loc and _is_member(loc[0]) else error
