"""Flower may watch, never act.

Flower's HTTP API can apply any task by name, revoke tasks, and shut down or resize
workers: whoever holds Flower's password could send a forged decision or stop the
service. toolrouter treats Flower's users as observers (see the security page of the
docs), so the acting endpoints answer 403, and ``/metrics`` asks for Flower's login like
every page. Workers, tasks, queues and the broker page stay as they are.

Flower builds its application from ``flower.urls.handlers``; every ``celery`` command
imports Flower's command (a plugin) before it loads ``workers.app``, so changing that
list in place when the app is loaded takes effect before Flower starts serving.
"""

from __future__ import annotations

import re
import sys
from typing import Any

# The endpoints that act on workers or tasks.
ACTING = re.compile(
    r"^/api/(worker/(shutdown|pool|queue)|task/(apply|async-apply|send-task|abort|timeout|"
    r"rate-limit|revoke))/"
)
REFUSAL = '{"ok": false, "error": "Flower is read-only under toolrouter"}'


def make_flower_read_only() -> None:
    """Refuse Flower's acting endpoints and protect its metrics; a no-op without Flower."""
    urls = sys.modules.get("flower.urls")
    if urls is None:
        return
    from flower.views import BaseHandler
    from flower.views.monitor import Metrics
    from tornado import web

    class Refused(BaseHandler):
        def _refuse(self, *_: Any, **__: Any) -> None:
            self.set_status(403)
            self.set_header("Content-Type", "application/json")
            self.finish(REFUSAL)

        get = post = put = delete = patch = _refuse

        def check_xsrf_cookie(self) -> None:
            """Refused whatever the form says: no token to check."""

    class AuthenticatedMetrics(Metrics):
        @web.authenticated
        async def get(self) -> None:
            await super().get()

    handlers: list[Any] = urls.handlers
    for index, handler in enumerate(handlers):
        pattern, target = _pattern_and_target(handler)
        if pattern is None:
            continue
        if ACTING.match(pattern.replace("\\", "")):
            handlers[index] = (pattern, Refused)
        elif target is Metrics:
            handlers[index] = (pattern, AuthenticatedMetrics)


def _pattern_and_target(handler: Any) -> tuple[str | None, Any]:
    if isinstance(handler, tuple):
        return handler[0], handler[1]
    regex = getattr(getattr(handler, "matcher", None), "regex", None)
    return (regex.pattern if regex is not None else None), getattr(handler, "target", None)
