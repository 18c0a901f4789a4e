"""MCP tasks (protocol 2025-11-25): a task-augmented ``tools/call`` answers at once with a
task, and ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` follow it.

A task is a call: its id is the call id, its state is the call's, so any API process can
answer for it and nothing about it lives in a process. A call waiting for an approval is
a ``working`` task whose status message names the request and who may approve it; denial
and expiry make it ``failed``, cancelling it (``tasks/cancel`` or ``DELETE
/v1/calls/{id}``) makes it ``cancelled``. Tasks are the key's own: another key's task id
reads as unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp import types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ..auth.principal import Principal
from ..db.rows import CallRow
from ..dispatch.submission import Submission
from ..errors import NotCancellable, NotFound
from ..messaging.completions import Notifier
from ..names import echo_name
from ..results import CallResult
from ..runtime import Runtime
from ..status import TERMINAL_STATES, CallStatus, Role
from ..threads import in_thread
from .calls_in_flight import idempotency_key_of
from .task_ledger import TaskEntry, TaskLedger
from .tools import STATUS_TOOL, render

RELATED_TASK_META = "io.modelcontextprotocol/related-task"
# Tasks came with 2025-11-25; earlier handshakes have none, and 2026-07-28 dropped these.
TASK_PROTOCOL_VERSIONS = frozenset({"2025-11-25"})
LIST_PAGE_SIZE = 50
# A shorter TTL would let a client's task vanish between its own two polls.
MIN_TTL_MS = 1000
# tasks/result waits in slices so a task whose wake-up was missed is still read again.
RESULT_WAIT_SLICE_S = 30.0

_TASK_STATUS: dict[str, types.TaskStatus] = {
    CallStatus.QUEUED: "working",
    CallStatus.RUNNING: "working",
    CallStatus.PENDING: "working",
    CallStatus.SUCCEEDED: "completed",
    CallStatus.FAILED: "failed",
    CallStatus.INTERRUPTED: "failed",
    CallStatus.DENIED: "failed",
    CallStatus.EXPIRED: "failed",
    CallStatus.CANCELLED: "cancelled",
}


def has_tasks(protocol_version: str | None) -> bool:
    """Whether a client on ``protocol_version`` knows tasks, so they are offered to it."""
    return protocol_version in TASK_PROTOCOL_VERSIONS


def task_capability() -> types.ServerTasksCapability:
    """What ``initialize`` advertises: tools/call as tasks, listing and cancelling."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def invalid(message: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=message)


class TaskService:
    """The handlers behind tasks; ``wait`` is the MCP server's bounded wait for a call."""

    def __init__(self, runtime: Runtime, ledger: TaskLedger, wait: Any, notifier: Notifier) -> None:
        self.runtime, self.ledger, self.wait, self.notifier = runtime, ledger, wait, notifier
        settings = runtime.settings
        self.max_ttl_ms = int(settings.mcp_task_ttl_s * 1000)
        self.poll_ms = settings.mcp_task_poll_ms

    # -- tools/call with a task ------------------------------------------------------

    async def create(self, who: Principal, raw: Any) -> types.CreateTaskResult:
        """Submit the call and answer with its task; refusals are JSON-RPC errors (no task
        exists for a call that was never taken)."""
        ttl_ms = self._ttl(raw)
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            raise invalid("invalid tools/call parameters") from None
        if not who.has(Role.AGENT):
            raise invalid("agent role required to submit calls")
        if params.name == STATUS_TOOL:
            raise invalid(f"{STATUS_TOOL} answers at once; call it without a task")
        key = idempotency_key_of(raw)
        args: Any = params.arguments if params.arguments is not None else {}
        result = await self.runtime.group_commit.submit(
            Submission(who.name, params.name, args, key)
        )
        if result.call_id is None:
            text = result.error or "call refused"
            if result.http_status == 503:
                raise MCPError(code=types.INTERNAL_ERROR, message=text)
            raise invalid(text)
        entry = await in_thread(self.ledger.add, who.name, result.call_id, ttl_ms)
        return types.CreateTaskResult(task=self._from_result(result, entry))

    def _ttl(self, raw: Any) -> int:
        """The TTL granted: the one asked for (whole ms, at least ``MIN_TTL_MS``), at most
        the configured one, which is also the TTL of a task that asks for none."""
        task = raw.get("task") if isinstance(raw, dict) else None
        requested = task.get("ttl") if isinstance(task, dict) else None
        if requested is None:
            return self.max_ttl_ms
        # JSON has one number type: a float without a fraction is a whole number.
        if isinstance(requested, float) and requested.is_integer():
            requested = int(requested)
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
            raise invalid("task.ttl must be a whole number of milliseconds")
        return max(MIN_TTL_MS, min(requested, self.max_ttl_ms))

    # -- tasks/* ---------------------------------------------------------------------

    async def get(self, who: Principal, task_id: str) -> types.GetTaskResult:
        entry, row = await self._task(who, task_id)
        return types.GetTaskResult(**self._task_fields(row, entry))

    async def result(
        self, who: Principal, task_id: str, *, waited: bool = False
    ) -> types.CallToolResult | None:
        """The call's outcome as ``tools/call`` would have answered it, or ``None`` after
        a wait: the caller checks the key again and asks again, so an outcome is only
        ever given right after its key was checked. ``waited``: this request already
        found the task working, so its outcome is owed even if the TTL ran out meanwhile."""
        entry, row = await self._task(who, task_id, keep_expired=waited)
        result = row.result()
        if result.status not in TERMINAL_STATES:
            await self.wait(who, task_id, RESULT_WAIT_SLICE_S)
            return None
        answer = render(result)
        meta = dict(answer.meta or {})
        meta[RELATED_TASK_META] = {"taskId": entry.task_id}
        return answer.model_copy(update={"meta": meta})

    async def cancel(self, who: Principal, task_id: str) -> types.CancelTaskResult:
        """Cancel as ``DELETE /v1/calls/{id}`` does: a queued or pending call only."""
        entry, row = await self._task(who, task_id)
        if row.status in TERMINAL_STATES:
            raise invalid(f"task is already {_TASK_STATUS[row.status]}")
        try:
            await in_thread(self.runtime.calls.cancel, who, task_id)
        except NotCancellable as exc:
            raise invalid(str(exc)) from None
        # Wakes whoever waits for the call (tasks/result, wait_s), as DELETE does.
        await in_thread(self.notifier.call_done, task_id)
        row = await in_thread(self.runtime.calls.get, who, task_id)
        return types.CancelTaskResult(**self._task_fields(row, entry))

    async def list(self, who: Principal, cursor: str | None) -> types.ListTasksResult:
        entries, next_cursor = await in_thread(self.ledger.page, who.name, cursor, LIST_PAGE_SIZE)
        tasks = []
        for entry in entries:
            try:
                row = await in_thread(self.runtime.calls.get, who, entry.task_id)
            except NotFound:
                continue
            tasks.append(types.Task(**self._task_fields(row, entry)))
        return types.ListTasksResult(tasks=tasks, next_cursor=next_cursor)

    # -- shapes ----------------------------------------------------------------------

    async def _task(
        self, who: Principal, task_id: str, *, keep_expired: bool = False
    ) -> tuple[TaskEntry, CallRow]:
        unknown = invalid(f"unknown task: {echo_name(task_id)}")
        entry = await in_thread(self.ledger.owned, who.name, task_id)
        if entry is None:
            raise unknown
        try:
            row = await in_thread(self.runtime.calls.get, who, task_id)
        except NotFound:
            raise unknown from None
        if row.status in TERMINAL_STATES and not keep_expired and self.ledger.expired(entry):
            raise unknown
        return entry, row

    def _task_fields(self, row: CallRow, entry: TaskEntry) -> dict[str, Any]:
        return {
            "task_id": entry.task_id,
            "status": _TASK_STATUS.get(row.status, "failed"),
            "status_message": self._message(row.result()),
            "created_at": iso(entry.created_at),
            "last_updated_at": iso(max(row.updated_at, entry.created_at)),
            "ttl": entry.ttl_ms,
            "poll_interval": self.poll_ms,
        }

    def _from_result(self, result: CallResult, entry: TaskEntry) -> types.Task:
        return types.Task(
            task_id=entry.task_id,
            status=_TASK_STATUS.get(result.status, "failed"),
            status_message=self._message(result),
            created_at=iso(entry.created_at),
            last_updated_at=iso(entry.created_at),
            ttl=entry.ttl_ms,
            poll_interval=self.poll_ms,
        )

    def _message(self, result: CallResult) -> str:
        status = result.status
        if status == CallStatus.PENDING:
            tool = self.runtime.registry.get(result.tool or "")
            who = ", ".join(tool.spec.approvers) if tool is not None else "an approver"
            return (
                f"awaiting approval: request {result.request_id} for {result.tool}; "
                f"may be approved by: {who}"
            )
        if status in (CallStatus.QUEUED, CallStatus.RUNNING):
            return f"{status}: {result.tool}"
        if status == CallStatus.SUCCEEDED:
            return "succeeded"
        if status == CallStatus.DENIED:
            return f"denied: request {result.request_id}" + (
                f" ({result.error})" if result.error else ""
            )
        if status == CallStatus.EXPIRED:
            return f"approval expired: request {result.request_id}"
        return f"{status}: {result.error}" if result.error else str(status)
