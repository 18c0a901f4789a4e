"""The MCP server: ``tools/list`` and ``tools/call`` on the runtime's registry and dispatcher.

Transport-agnostic: the streamable-HTTP mount (``router.mcp.http``) and the stdio command
(``router.mcp.stdio``) each pass the way to tell who is calling. A call made over MCP is
the same call as one made over HTTP: the same dispatcher, queues, approvals and audit log,
with the key's name as the requester.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..auth.principal import Principal
from ..dispatch.submission import Submission
from ..errors import NotAuthenticated, NotFound, RequestError, StoreUnavailable, Unavailable
from ..messaging.completions import CompletionListener
from ..messaging.redis_clients import redis_client
from ..messaging.waiting import wait_for_call
from ..names import echo_name
from ..results import CallResult
from ..runtime import Runtime
from ..status import TERMINAL_STATES, CallStatus, Role
from ..threads import in_thread
from .call_reports import CallReports, LogLevels
from .calls_in_flight import CallsInFlight, idempotency_key_of
from .task_ledger import TaskLedger
from .tasks import TaskService, has_tasks, task_capability
from .tools import STATUS_FIELDS, STATUS_TOOL, error_result, mcp_tool, render, status_tool

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
# Who is calling, from the request (HTTP) or the key the process was started with (stdio).
# Raises ``RequestError`` (no or bad key) or ``Unavailable``.
Identify = Callable[[Context], Awaitable[Principal]]

NOT_AN_AGENT = "agent role required to submit calls"
# For a message that is JSON but no JSON-RPC message (``[]``, ``null``, a wrong version).
NOT_JSON_RPC = "invalid request: not a JSON-RPC 2.0 request, notification or response"


class _Server(Server[Any]):
    """The SDK's server, advertising the tasks it serves through toolrouter's handlers on
    the handshake versions (2026-07-28 has neither these tasks nor logging); the handshake
    takes them back from a client whose version has none (``without_tasks``)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            return capabilities.model_copy(update={"logging": None})
        return capabilities.model_copy(update={"tasks": task_capability()})


def without_tasks(answer: HandlerResult) -> HandlerResult:
    """An ``initialize`` answer (its wire form), offering tasks only to a version that has
    them: the SDK builds one answer for every handshake version."""
    if not isinstance(answer, dict) or has_tasks(answer.get("protocolVersion")):
        return answer
    capabilities = answer.get("capabilities")
    if not isinstance(capabilities, dict) or "tasks" not in capabilities:
        return answer
    kept = {name: value for name, value in capabilities.items() if name != "tasks"}
    return {**answer, "capabilities": kept}


def guarded(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A tasks/* or logging handler whose every failure is a JSON-RPC error with a clear
    message (the SDK would send an unexpected exception's own text)."""

    async def run(ctx: Context, params: Any) -> Any:
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except RequestError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except Unavailable as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        except Exception:
            log.exception("MCP %s failed unexpectedly", ctx.method)
            raise MCPError(code=types.INTERNAL_ERROR, message="internal error") from None

    return run


def tasks_only(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A tasks/* handler, unknown to a client whose protocol has no tasks, as the SDK
    answers any method a protocol lacks."""

    async def run(ctx: Context, params: Any) -> Any:
        if not has_tasks(ctx.protocol_version):
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
        return await handler(ctx, params)

    return run


class ToolrouterMcp:
    """Serves the registered tools to MCP clients; ``server`` is the SDK's low-level server."""

    def __init__(self, runtime: Runtime, listener: CompletionListener, identify: Identify) -> None:
        self.runtime, self.listener, self.identify = runtime, listener, identify
        settings = runtime.settings
        self.call_wait_s = settings.mcp_call_wait_s
        self.max_wait_s = settings.max_wait_s
        self.poll_s = settings.mcp_task_poll_ms / 1000
        # Shared by every API process, since any of them may take a key's next request.
        state = redis_client(runtime.redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.in_flight = CallsInFlight(state, runtime.namespace)
        self.log_levels = LogLevels(state, runtime.namespace)
        # Wakes whoever waits for a call this server cancelled, as DELETE /v1/calls does.
        self.notifier = runtime.notifier()
        self.tasks = TaskService(
            runtime, TaskLedger(runtime.store, runtime.clock), self.wait, self.notifier
        )
        self.server: Server[Any] = _Server(
            "toolrouter",
            version="1",
            instructions=(
                "Tools served by toolrouter. Calls to tools that need a human approval answer "
                f"with a pending request; {STATUS_TOOL} gives their outcome later (or, where "
                "the tools offer it, call them as tasks)."
            ),
            get_tool_input_schema=self._input_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        # Outermost of toolrouter's own: a tools/call with a task is answered here, since
        # the SDK checks tools/call answers against CallToolResult.
        self.server.middleware.append(self._tasks_middleware)
        add = self.server.add_request_handler
        add("tasks/get", types.GetTaskRequestParams, tasks_only(guarded(self._tasks_get)))
        add(
            "tasks/result",
            types.GetTaskPayloadRequestParams,
            tasks_only(guarded(self._tasks_result)),
        )
        add("tasks/cancel", types.CancelTaskRequestParams, tasks_only(guarded(self._tasks_cancel)))
        add("tasks/list", types.PaginatedRequestParams, tasks_only(guarded(self._tasks_list)))
        add("logging/setLevel", types.SetLevelRequestParams, guarded(self._set_level))
        self.server.add_notification_handler(
            "notifications/cancelled", types.CancelledNotificationParams, self._cancelled
        )

    async def _who(self, ctx: Context) -> Principal:
        """The caller, or the JSON-RPC error that says why there is none."""
        try:
            return await self.identify(ctx)
        except RequestError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None
        except Unavailable as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The tools this key may call: all of them for agents, none for other keys."""
        who = await self._who(ctx)
        if params is not None and params.cursor is not None:
            # Every tool comes in the first page: no cursor was ever given out.
            raise MCPError(code=types.INVALID_PARAMS, message="invalid cursor")
        if not who.has(Role.AGENT):
            return types.ListToolsResult(tools=[])
        tools = [mcp_tool(tool) for tool in self.runtime.registry]
        status = status_tool(self.max_wait_s)
        if has_tasks(ctx.protocol_version):
            as_task = types.ToolExecution(task_support="optional")
            tools = [tool.model_copy(update={"execution": as_task}) for tool in tools]
            status = status.model_copy(
                update={"execution": types.ToolExecution(task_support="forbidden")}
            )
        return types.ListToolsResult(tools=[status, *tools])

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
            return await self._status(ctx, who, args)
        key = idempotency_key_of(ctx.params)
        # Shared with the HTTP API's submissions of this process (router.dispatch.group_commit).
        result = await self.runtime.group_commit.submit(
            Submission(who.name, params.name, args, key)
        )
        reports = await CallReports.start(ctx, who.name, self.log_levels)
        if result.call_id is not None:
            await reports.saw(result)
        running = result.status in (CallStatus.QUEUED, CallStatus.RUNNING)
        if running and result.call_id is not None and self.call_wait_s > 0:
            accepted = result
            result = await self._wait_reporting(ctx, who, result.call_id, reports)
            try:
                await self.identify(ctx)  # a key revoked during the wait gets no outcome
            except StoreUnavailable:
                result = accepted  # nor one whose key cannot be checked again
        return render(result)

    async def _wait_reporting(
        self, ctx: Context, who: Principal, call_id: str, reports: CallReports
    ) -> CallResult:
        """Wait the bounded time for the call; with a progress token, look at it every poll
        interval so that ``running`` is reported too."""
        await in_thread(self.in_flight.add, who.name, ctx.request_id, call_id)
        deadline = anyio.current_time() + self.call_wait_s
        slice_s = self.poll_s if reports.wants_progress else self.call_wait_s
        result: CallResult | None = None
        first = True
        while True:
            remaining = deadline - anyio.current_time()
            if result is not None and (remaining <= 0 or result.status in TERMINAL_STATES):
                break
            try:
                result = await self.wait(
                    who,
                    call_id,
                    max(0.0, min(slice_s, remaining)),
                    known_unfinished=first,
                    accepted=True,
                )
            except StoreUnavailable:
                # Accepted, so told as it stands once on disk: an error would have the call
                # submitted again.
                result = await in_thread(self.runtime.calls.accepted_on_disk, who, call_id)
                break
            first = False
            if result.status in TERMINAL_STATES:
                try:
                    await self.identify(ctx)  # a key revoked meanwhile hears no outcome
                except NotAuthenticated:
                    await in_thread(self.in_flight.done, who.name, ctx.request_id, call_id)
                    raise
            await reports.saw(result)
        # Not on cancellation: a notifications/cancelled that follows must find the call.
        await in_thread(self.in_flight.done, who.name, ctx.request_id, call_id)
        return result

    async def _status(self, ctx: Context, who: Principal, args: Any) -> types.CallToolResult:
        unknown = sorted(set(args) - STATUS_FIELDS) if isinstance(args, dict) else []
        if unknown:
            return error_result(f"unknown field: {echo_name(unknown[0])}")
        call_id = args.get("call_id") if isinstance(args, dict) else None
        if not isinstance(call_id, str) or not call_id:
            return error_result("call_id must be a call id string")
        wait_s = args.get("wait_s")
        wait_s = 0 if wait_s is None else wait_s  # null is no wait, as in the HTTP API
        # Compared, not converted: an integer too large for a float is out of range too,
        # and NaN is within no range.
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float):
            return error_result("wait_s must be a number of seconds")  # as the HTTP API says
        if not 0 <= wait_s <= self.max_wait_s:
            return error_result(f"wait_s must be between 0 and {self.max_wait_s:g}")
        try:
            if wait_s > 0:
                result = await self.wait(who, call_id, float(wait_s))
                await self.identify(ctx)  # a key revoked during the wait gets no outcome
            else:
                result = (await in_thread(self.runtime.calls.get, who, call_id)).result()
        except NotFound:
            return error_result(f"unknown call: {echo_name(call_id)}")
        return render(result)

    async def wait(
        self,
        who: Principal,
        call_id: str,
        wait_s: float,
        *,
        known_unfinished: bool = False,
        accepted: bool = False,
    ) -> CallResult:
        """The call once it is terminal, or as it stands when ``wait_s`` runs out;
        ``accepted``: one this request accepted (``CallService.get_accepted``)."""
        calls = self.runtime.calls
        return await wait_for_call(
            self.listener,
            call_id,
            functools.partial(calls.get_accepted if accepted else calls.get, who, call_id),
            wait_s,
            known_unfinished=known_unfinished,
        )

    # -- tasks, logging, cancellation ---------------------------------------------------

    async def _tasks_middleware(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            return without_tasks(await call_next(ctx))
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and isinstance(params, Mapping)
            and params.get("task") is not None
            and has_tasks(ctx.protocol_version)
        ):
            return await guarded(self._create_task)(ctx, params)
        return await call_next(ctx)

    async def _create_task(self, ctx: Context, params: Any) -> HandlerResult:
        return await self.tasks.create(await self._who(ctx), params)

    async def _tasks_get(self, ctx: Context, params: types.GetTaskRequestParams) -> HandlerResult:
        return await self.tasks.get(await self._who(ctx), params.task_id)

    async def _tasks_result(
        self, ctx: Context, params: types.GetTaskPayloadRequestParams
    ) -> HandlerResult:
        """Blocks until the task is finished, checking the key again between waits: a key
        revoked meanwhile gets an error, not the outcome. A task that finishes after its
        TTL ran out still answers the request that waited for it."""
        waited = False
        while True:
            who = await self._who(ctx)
            answer = await self.tasks.result(who, params.task_id, waited=waited)
            if answer is not None:
                return answer
            waited = True

    async def _tasks_cancel(
        self, ctx: Context, params: types.CancelTaskRequestParams
    ) -> HandlerResult:
        return await self.tasks.cancel(await self._who(ctx), params.task_id)

    async def _tasks_list(
        self, ctx: Context, params: types.PaginatedRequestParams
    ) -> HandlerResult:
        return await self.tasks.list(await self._who(ctx), params.cursor)

    async def _set_level(self, ctx: Context, params: types.SetLevelRequestParams) -> HandlerResult:
        who = await self._who(ctx)
        await in_thread(self.log_levels.set, who.name, params.level)
        return types.EmptyResult()

    async def _cancelled(self, ctx: Context, params: types.CancelledNotificationParams) -> None:
        """Cancel the call a cancelled ``tools/call`` made, as ``DELETE /v1/calls/{id}``
        would: a queued or pending call of the key's own; anything else is left alone."""
        if params.request_id is None:
            return
        try:
            who = await self.identify(ctx)
        except (RequestError, Unavailable):
            return
        with anyio.CancelScope(shield=True):
            call_id = await in_thread(self.in_flight.take, who.name, params.request_id)
            if call_id is None:
                return
            try:
                # Key-scoped: a call id planted in Redis cancels none but the key's own.
                await in_thread(self.runtime.calls.cancel, who, call_id)
                await in_thread(self.notifier.call_done, call_id)
            except (RequestError, Unavailable) as exc:
                log.info("MCP cancel of call %s not applied: %s", call_id, exc)

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        # Lets the SDK check Mcp-Param headers without running tools/list for every call.
        if name == STATUS_TOOL:
            return status_tool(self.max_wait_s).input_schema
        tool = self.runtime.registry.get(name)
        return None if tool is None else tool.spec.input_schema
