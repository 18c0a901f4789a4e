"""``toolrouter mcp``: the MCP server on stdin/stdout, for clients that launch their servers.

The process talks to the database and Redis itself (it is a small API process without the
HTTP), so calls made through it are dispatched, gated and audited like any other. The key
it was started with is checked again on every request, so revoking it takes effect at once.
"""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from ..auth.principal import Principal
from ..runtime import Runtime
from ..threads import in_thread
from .server import Context, ToolrouterMcp


async def serve_stdio(runtime: Runtime, token: str) -> None:
    """Serve MCP on this process's stdin and stdout until the client closes stdin."""

    async def identify(_: Context) -> Principal:
        return await in_thread(runtime.keys.authenticate, token)

    listener = runtime.listener
    listener.start()
    try:
        mcp = ToolrouterMcp(runtime, listener, identify)
        async with stdio_server() as (read_stream, write_stream):
            await mcp.server.run(
                read_stream, write_stream, mcp.server.create_initialization_options()
            )
    finally:
        await listener.stop()


def run_stdio(runtime: Runtime, token: str) -> None:
    """Blocking entry point for the CLI."""
    anyio.run(serve_stdio, runtime, token)
