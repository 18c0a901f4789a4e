"""The MCP server: ``tools/list`` and ``tools/call`` on the runtime's registry and dispatcher.

Transport-agnostic: the streamable-HTTP mount (``router.mcp.http``) and the stdio command
(``router.mcp.stdio``) each pass the way to tell who is calling. A call made over MCP is
the same call as one made over HTTP: the same dispatcher, queues, approvals and audit log,
with the key's name as the requester.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from ..auth.principal import Principal
from ..dispatch.dispatcher import Submission
from ..errors import NotFound, RequestError, Unavailable
from ..messaging.completions import CompletionListener
from ..messaging.waiting import wait_for_call
from ..names import echo_name
from ..results import CallResult
from ..runtime import Runtime
from ..status import CallStatus, Role
from ..threads import in_thread
from .tools import STATUS_TOOL, error_result, mcp_tool, render, status_tool

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
# Who is calling, from the request (HTTP) or the key the process was started with (stdio).
# Raises ``RequestError`` (no or bad key) or ``Unavailable``.
Identify = Callable[[Context], Awaitable[Principal]]

NOT_AN_AGENT = "agent role required to submit calls"


class ToolrouterMcp:
    """Serves the registered tools to MCP clients; ``server`` is the SDK's low-level server."""

    def __init__(self, runtime: Runtime, listener: CompletionListener, identify: Identify) -> None:
        self.runtime, self.listener, self.identify = runtime, listener, identify
        settings = runtime.settings
        self.call_wait_s = settings.mcp_call_wait_s
        self.max_wait_s = settings.max_wait_s
        self.server: Server[Any] = Server(
            "toolrouter",
            version="1",
            instructions=(
                "Tools served by toolrouter. Calls to tools that need a human approval answer "
                f"with a pending request; {STATUS_TOOL} gives their outcome later."
            ),
            get_tool_input_schema=self._input_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The tools this key may call: all of them for agents, none for other keys."""
        try:
            who = await self.identify(ctx)
        except RequestError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None
        except Unavailable as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        if not who.has(Role.AGENT):
            return types.ListToolsResult(tools=[])
        tools = [mcp_tool(tool) for tool in self.runtime.registry]
        return types.ListToolsResult(tools=[status_tool(self.max_wait_s), *tools])

    async def call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Submit through the dispatcher; wait a bounded time for an ungated call. Never raises."""
        try:
            return await self._call(ctx, params)
        except (RequestError, Unavailable) as exc:
            return error_result(str(exc))
        except Exception:
            log.exception("MCP tools/call failed unexpectedly")
            return error_result("internal error")

    async def _call(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        who = await self.identify(ctx)
        if not who.has(Role.AGENT):
            return error_result(NOT_AN_AGENT)
        args: Any = params.arguments if params.arguments is not None else {}
        if params.name == STATUS_TOOL:
            return await self._status(who, args)
        # Shared with the HTTP API's submissions of this process (router.dispatch.group_commit).
        result = await self.runtime.group_commit.submit(Submission(who.name, params.name, args))
        running = result.status in (CallStatus.QUEUED, CallStatus.RUNNING)
        if running and result.call_id is not None and self.call_wait_s > 0:
            result = await self.wait(who, result.call_id, self.call_wait_s, known_unfinished=True)
        return render(result)

    async def _status(self, who: Principal, args: Any) -> types.CallToolResult:
        call_id = args.get("call_id") if isinstance(args, dict) else None
        if not isinstance(call_id, str) or not call_id:
            return error_result("call_id must be a call id string")
        wait_s = args.get("wait_s", 0)
        if (
            isinstance(wait_s, bool)
            or not isinstance(wait_s, int | float)
            or not math.isfinite(wait_s)
            or not 0 <= wait_s <= self.max_wait_s
        ):
            return error_result(f"wait_s must be between 0 and {self.max_wait_s:g}")
        try:
            if wait_s > 0:
                result = await self.wait(who, call_id, float(wait_s))
            else:
                result = (await in_thread(self.runtime.calls.get, who, call_id)).result()
        except NotFound:
            return error_result(f"unknown call: {echo_name(call_id)}")
        return render(result)

    async def wait(
        self, who: Principal, call_id: str, wait_s: float, *, known_unfinished: bool = False
    ) -> CallResult:
        """The call once it is terminal, or as it stands when ``wait_s`` runs out."""
        return await wait_for_call(
            self.listener,
            call_id,
            lambda: self.runtime.calls.get(who, call_id),
            wait_s,
            known_unfinished=known_unfinished,
        )

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        # Lets the SDK check Mcp-Param headers without running tools/list for every call.
        if name == STATUS_TOOL:
            return status_tool(self.max_wait_s).input_schema
        tool = self.runtime.registry.get(name)
        return None if tool is None else tool.spec.input_schema
