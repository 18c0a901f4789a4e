"""``toolrouter mcp``: the MCP server on stdin/stdout, for clients that launch their servers.

The process talks to the database and Redis itself (it is a small API process without the
HTTP), so calls made through it are dispatched, gated and audited like any other. The key
it was started with is checked again on every request, so revoking it takes effect at once.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

from ..auth.principal import Principal
from ..runtime import Runtime
from ..threads import in_thread
from .server import Context, ToolrouterMcp


class AnsweredBeforeEnd:
    """Between the transport and the server: at the end of input, the server's read side
    closes only once every request read has been answered, so a client that writes its
    requests and closes stdin still gets every answer."""

    def __init__(self) -> None:
        self.open_requests: set[Any] = set()
        self.changed = anyio.Event()

    async def forward_requests(self, source: Any, sink: Any) -> None:
        async with sink:
            async for message in source:
                if isinstance(message, SessionMessage) and isinstance(
                    message.message, JSONRPCRequest
                ):
                    self.open_requests.add(message.message.id)
                await sink.send(message)
            while self.open_requests:
                await self.changed.wait()
                self.changed = anyio.Event()

    async def forward_answers(self, source: Any, sink: Any) -> None:
        async with source, sink:
            async for message in source:
                if isinstance(message.message, JSONRPCResponse | JSONRPCError):
                    self.open_requests.discard(message.message.id)
                    self.changed.set()
                await sink.send(message)


async def serve_stdio(runtime: Runtime, token: str) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin and every
    request it sent has its answer."""

    async def identify(_: Context) -> Principal:
        return await in_thread(runtime.keys.authenticate, token)

    listener = runtime.listener
    listener.start()
    try:
        mcp = ToolrouterMcp(runtime, listener, identify)
        relay = AnsweredBeforeEnd()
        async with stdio_server() as (stdin, stdout), anyio.create_task_group() as tasks:
            to_server, server_reads = anyio.create_memory_object_stream[Any](16)
            server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
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
