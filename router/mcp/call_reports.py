"""What an MCP client hears while its call moves: ``notifications/progress`` (when the
request carried a ``progressToken``) and ``notifications/message`` log entries at or above
the level the key set with ``logging/setLevel``.

Progress counts the states the call has been seen in (queued, awaiting approval, running,
finished); the last notification gives the total. Log entries name the call, its tool and
its status, and the error or request where there is one.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from mcp import types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..results import CallResult
from ..status import TERMINAL_STATES, CallStatus

log = logging.getLogger(__name__)

LOGGER_NAME = "toolrouter"
# RFC 5424 severities, least severe first (MCP's LoggingLevel).
LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
# Outcomes only a handler run gives.
RAN = frozenset({CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.INTERRUPTED})

_LEVEL_OF: dict[str, types.LoggingLevel] = {
    CallStatus.PENDING: "notice",
    CallStatus.FAILED: "warning",
    CallStatus.INTERRUPTED: "warning",
    CallStatus.DENIED: "warning",
    CallStatus.EXPIRED: "warning",
    CallStatus.CANCELLED: "notice",
}


class LogLevels:
    """The level each key asked for, in this process (stdio serves one key; over stateless
    HTTP a key's level holds for the API process that took its ``logging/setLevel``).
    A key that never asked gets no log messages: they cost a write each and most clients
    do not show them."""

    def __init__(self) -> None:
        self._levels: dict[str, types.LoggingLevel] = {}

    def set(self, owner: str, level: types.LoggingLevel) -> None:
        self._levels[owner] = level

    def allows(self, owner: str, level: types.LoggingLevel) -> bool:
        wanted = self._levels.get(owner)
        return wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)


class CallReports:
    """Progress and log notifications for one ``tools/call`` request."""

    def __init__(self, ctx: Any, owner: str, levels: LogLevels) -> None:
        self.ctx, self.owner, self.levels = ctx, owner, levels
        meta = ctx.meta or {}
        self.wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        # Logging left the protocol in 2026-07-28 (requests opt in per call there instead).
        self.logs = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        self.steps = 0
        self.last: str | None = None

    async def saw(self, result: CallResult) -> None:
        """Report ``result`` if its status is new. A call that ran is reported running
        before its outcome even when it ran between two looks at it."""
        if result.status in RAN and self.last in (CallStatus.QUEUED, CallStatus.PENDING):
            await self._report(replace(result, status=CallStatus.RUNNING, value=None, error=None))
        await self._report(result)

    async def _report(self, result: CallResult) -> None:
        """One notification of each kind; a failed send never fails the call."""
        status = str(result.status)
        if status == self.last:
            return
        self.last = status
        self.steps += 1
        finished = result.status in TERMINAL_STATES
        try:
            if self.wants_progress:
                await self.ctx.session.report_progress(
                    self.steps, self.steps if finished else None, _progress_text(result)
                )
            level = _LEVEL_OF.get(status, "info")
            if self.logs and self.levels.allows(self.owner, level):
                await self.ctx.session.send_notification(
                    types.LoggingMessageNotification(
                        params=types.LoggingMessageNotificationParams(
                            level=level, logger=LOGGER_NAME, data=_log_data(result)
                        )
                    ),
                    self.ctx.request_id,
                )
        except Exception as exc:
            log.debug("MCP notification not sent: %s", exc)


def _progress_text(result: CallResult) -> str:
    if result.status == CallStatus.PENDING:
        return f"awaiting approval (request {result.request_id})"
    return f"{result.status}"


def _log_data(result: CallResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "message": f"call {result.call_id} ({result.tool}) {result.status}",
        "call_id": result.call_id,
        "tool": result.tool,
        "status": str(result.status),
    }
    if result.request_id is not None:
        data["request_id"] = result.request_id
    if result.error:
        data["error"] = result.error
    return data
