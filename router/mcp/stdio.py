"""``toolrouter mcp``: the MCP server on stdin/stdout, for clients that launch their servers.

The process talks to the database and Redis itself (it is a small API process without the
HTTP), so calls made through it are dispatched, gated and audited like any other. The key
it was started with is checked again on every request, so revoking it takes effect at once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)
from pydantic import ValidationError

from ..auth.principal import Principal
from ..runtime import Runtime
from ..threads import in_thread
from .server import NOT_JSON_RPC, Context, ToolrouterMcp

CANCELLED = "notifications/cancelled"


class AnsweredBeforeEnd:
    """Between the transport and the server: at the end of input, the server's read side
    closes only once every request read has been answered or cancelled, so a client that
    writes its requests and closes stdin still gets every answer. A line that is no
    JSON-RPC message is answered here, through ``replies``, as ``/mcp`` answers it."""

    def __init__(self, replies: Any) -> None:
        self.replies = replies
        # Counted, not a set: a client may reuse an id (each use gets its own answer).
        self.open_requests: Counter[tuple[str, str]] = Counter()
        self.changed = anyio.Event()

    async def forward_requests(self, source: Any, sink: Any) -> None:
        async with sink, self.replies:
            async for message in source:
                if isinstance(message, Exception):
                    # The SDK would drop the line, and its sender wait for an answer.
                    await self.replies.send(SessionMessage(unreadable(message)))
                    continue
                if isinstance(message, SessionMessage):
                    self._note(message.message)
                await sink.send(message)
            while +self.open_requests:
                await self.changed.wait()
                self.changed = anyio.Event()

    def _note(self, message: Any) -> None:
        if isinstance(message, JSONRPCRequest):
            self.open_requests[_id(message.id)] += 1
        elif isinstance(message, JSONRPCNotification) and message.method == CANCELLED:
            # A cancelled request is never answered.
            params = message.params if isinstance(message.params, dict) else {}
            self._settle(params.get("requestId"))

    def _settle(self, request_id: Any) -> None:
        key = _id(request_id)
        if self.open_requests[key] > 0:
            self.open_requests[key] -= 1
        self.changed.set()

    async def forward_answers(self, source: Any, sink: Any) -> None:
        async with source, sink:
            async for message in source:
                if isinstance(message.message, JSONRPCResponse | JSONRPCError):
                    self._settle(message.message.id)
                await sink.send(message)


def unreadable(exc: Exception) -> JSONRPCError:
    """The error for a line that is no JSON (a parse error) or no JSON-RPC message."""
    code, text = INVALID_REQUEST, NOT_JSON_RPC
    if isinstance(exc, ValidationError):
        for error in exc.errors():
            if error["type"] == "json_invalid":
                detail = str(error["msg"]).removeprefix("Invalid JSON: ")
                code, text = PARSE_ERROR, f"Parse error: {detail}"
    return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=text))


def _id(request_id: Any) -> tuple[str, str]:
    return type(request_id).__name__, str(request_id)


async def serve_stdio(runtime: Runtime, token: str) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin and every
    request it sent has its answer."""

    async def identify(_: Context) -> Principal:
        return await in_thread(runtime.keys.authenticate, token)

    listener = runtime.listener
    listener.start()
    try:
        mcp = ToolrouterMcp(runtime, listener, identify)
        async with stdio_server() as (stdin, stdout), anyio.create_task_group() as tasks:
            to_server, server_reads = anyio.create_memory_object_stream[Any](16)
            server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
            relay = AnsweredBeforeEnd(server_writes.clone())
            tasks.start_soon(relay.forward_requests, stdin, to_server)
            tasks.start_soon(relay.forward_answers, from_server, stdout)
            async with server_writes:
                await mcp.server.run(
                    server_reads, server_writes, mcp.server.create_initialization_options()
                )
    finally:
        await listener.stop()


def run_stdio(runtime: Runtime, token: str) -> None:
    """Blocking entry point for the CLI."""
    anyio.run(serve_stdio, runtime, token)
