"""toolrouter as an MCP server (SPEC §11): ``/mcp`` over streamable HTTP, and stdio.

tools.py    registry tools as MCP tools; call results as MCP tool results
server.py   tools/list and tools/call through the dispatcher (transport-agnostic)
http.py     the ``/mcp`` endpoint: Host/Origin check, bearer key, JSON errors
stdio.py    ``toolrouter mcp``
"""

from .http import McpEndpoint, transport_security
from .server import ToolrouterMcp
from .stdio import run_stdio, serve_stdio
from .tools import STATUS_TOOL

__all__ = [
    # serving
    "McpEndpoint",
    "ToolrouterMcp",
    "run_stdio",
    "serve_stdio",
    # shapes
    "STATUS_TOOL",
    "transport_security",
]
