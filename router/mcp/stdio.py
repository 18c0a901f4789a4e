"""``toolrouter mcp``: the MCP server on stdin/stdout, for clients that launch their servers.

The process talks to the database and Redis itself (it is a small API process without the
HTTP), so calls made through it are dispatched, gated and audited like any other. The key
it was started with is checked again on every request, so revoking it takes effect at once.

Lines are read as bytes and parsed here, as ``/mcp`` parses a body: invalid UTF-8 is a parse
error (the SDK's reader would replace it and run the call on other arguments), and a
request whose id is no string or integer is refused (the SDK's would drop it unanswered).
"""

from __future__ import annotations

import fcntl
import io
import os
import sys
from collections import Counter
from collections.abc import AsyncIterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import anyio
import mcp_types
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
from .wire import BAD_REQUEST_ID, has_bad_request_id

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

    async def forward_requests(self, lines: AsyncIterable[bytes], sink: Any) -> None:
        async with sink, self.replies:
            async for line in lines:
                message = read_line(line)
                if isinstance(message, JSONRPCError):
                    # Answered here: the SDK would drop the line, its sender waiting on.
                    await self.replies.send(SessionMessage(message))
                    continue
                self._note(message)
                await sink.send(SessionMessage(message))
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


def read_line(line: bytes) -> Any:
    """The JSON-RPC message on ``line``, or the error that answers it."""
    if has_bad_request_id(line):
        error = ErrorData(code=INVALID_REQUEST, message=BAD_REQUEST_ID)
        return JSONRPCError(jsonrpc="2.0", id=None, error=error)
    try:
        # Bytes, not text: the parser refuses invalid UTF-8 as /mcp's does.
        return mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:
        return unreadable(exc)


@contextmanager
def client_stdin() -> Iterator[BinaryIO]:
    """The client's stdin on a private descriptor, fd 0 on the null device meanwhile (as the
    SDK's reader has it): nothing else in the process can take the client's bytes."""
    try:
        private = fcntl.fcntl(sys.stdin.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        yield sys.stdin.buffer  # no descriptor to divert (stdin replaced in-process)
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        # Never closed: a reading thread may still block on it after the session ends.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


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
        with client_stdin() as lines:
            await _serve(mcp, anyio.wrap_file(lines))
    finally:
        await listener.stop()


async def _serve(mcp: ToolrouterMcp, lines: AsyncIterable[bytes]) -> None:
    # The SDK writes stdout; stdin is read here, its own reader given an empty input.
    no_input = anyio.wrap_file(io.StringIO())
    async with (
        stdio_server(stdin=no_input) as (unused, stdout),
        anyio.create_task_group() as tasks,
    ):
        await unused.aclose()
        to_server, server_reads = anyio.create_memory_object_stream[Any](16)
        server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
        relay = AnsweredBeforeEnd(server_writes.clone())
        tasks.start_soon(relay.forward_requests, lines, to_server)
        tasks.start_soon(relay.forward_answers, from_server, stdout)
        async with server_writes:
            await mcp.server.run(
                server_reads, server_writes, mcp.server.create_initialization_options()
            )


def run_stdio(runtime: Runtime, token: str) -> None:
    """Blocking entry point for the CLI."""
    anyio.run(serve_stdio, runtime, token)
