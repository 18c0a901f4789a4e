"""toolrouter as an MCP server (SPEC §11): ``/mcp`` over streamable HTTP, and stdio.

tools.py            registry tools as MCP tools; call results as MCP tool results
server.py           tools/list and tools/call through the dispatcher (transport-agnostic)
tasks.py            task-augmented tools/call and tasks/get|result|cancel|list
task_ledger.py      which calls are tasks, of which key, readable until when
call_reports.py     progress and log notifications while a call is waited for
calls_in_flight.py  idempotency keys in _meta; notifications/cancelled to the call
http.py             the ``/mcp`` endpoint: Host/Origin check, bearer key, JSON errors
stdio.py            ``toolrouter mcp``
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
