"""What an MCP client hears while its call moves: ``notifications/progress`` (when the
request carried a ``progressToken``) and ``notifications/message`` log entries at or above
the level the key set with ``logging/setLevel`` (kept in Redis: any API process may serve
the key's next request).

Progress counts the states the call has been seen in (queued, awaiting approval, running,
finished); the last notification gives the total. Log entries name the call, its tool and
its status, and the error or request where there is one.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import redis
from mcp import types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..constants import MCP_LOG_LEVEL
from ..errors import Unavailable
from ..messaging.namespace import Namespace
from ..results import CallResult
from ..status import TERMINAL_STATES, CallStatus
from ..threads import in_thread

log = logging.getLogger(__name__)

LOGGER_NAME = "toolrouter"
# In Redis, under the namespace (+ the key's name): the level a key set.
# How long a level holds after the key last set it (clients set it as they connect).
LEVEL_KEPT_S = 24 * 3600.0
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
    """The level each key asked for, in Redis, so that it holds for the key's requests
    whichever API process (or ``toolrouter mcp``) serves them. A key that never asked gets
    no log messages: they cost a write each and most clients do not show them.

    Blocking (run it ``in_thread``). Redis is not trusted: a planted level only changes
    which of its own notifications the key is sent.
    """

    def __init__(
        self, client: redis.Redis, namespace: Namespace, *, keep_s: float = LEVEL_KEPT_S
    ) -> None:
        self.client, self.namespace = client, namespace
        self.keep_ms = max(1, round(keep_s * 1000))

    def set(self, owner: str, level: types.LoggingLevel) -> None:
        """Kept ``keep_s`` from the last time the key set it. Raises ``Unavailable``."""
        try:
            self.client.set(self._name(owner), level, px=self.keep_ms)
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from None

    def get(self, owner: str) -> types.LoggingLevel | None:
        """The key's level; None if it set none, or if Redis does not answer (logged)."""
        try:
            stored = self.client.get(self._name(owner))
        except redis.RedisError as exc:
            log.warning("MCP log level of %s not read; no log messages: %s", owner, exc)
            return None
        if not isinstance(stored, bytes):
            return None
        text = stored.decode("ascii", "replace")
        return next((level for level in LEVELS if level == text), None)

    def _name(self, owner: str) -> str:
        # The key's name is at most KEY_NAME_MAX characters.
        return self.namespace.key(MCP_LOG_LEVEL, owner)


def allows(wanted: types.LoggingLevel | None, level: types.LoggingLevel) -> bool:
    """Whether a message at ``level`` is sent to a key that asked for ``wanted``."""
    return wanted is not None and LEVELS.index(level) >= LEVELS.index(wanted)


class CallReports:
    """Progress and log notifications for one ``tools/call`` request; ``level`` is what
    the key asked for (``start`` reads it, once per request)."""

    def __init__(self, ctx: Any, level: types.LoggingLevel | None = None) -> None:
        self.ctx, self.level = ctx, level
        meta = ctx.meta or {}
        self.wants_progress = meta.get("progress_token", meta.get("progressToken")) is not None
        # Logging left the protocol in 2026-07-28 (requests opt in per call there instead).
        self.logs = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        self.steps = 0
        self.last: str | None = None

    @classmethod
    async def start(cls, ctx: Any, owner: str, levels: LogLevels) -> CallReports:
        """The reports of ``owner``'s request, with the level it set (looked up only where
        the protocol has logging)."""
        reports = cls(ctx)
        if reports.logs:
            reports.level = await in_thread(levels.get, owner)
        return reports

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
            if self.logs and allows(self.level, level):
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
