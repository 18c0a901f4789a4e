"""The long-lived objects of one worker process, built as the pool process starts.

They are built beside the process's first tasks, in a thread of their own: building them
starts the config's MCP servers, which may take longer than Celery lets a pool process's
start-up take, and longer than a decision may wait (an approval's first decision after
start-up would miss its deadline). A task that comes first waits for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from celery import current_app, signals

from router import metrics
from router.constants import TOOL_QUEUES
from router.errors import ConfigError
from router.heap import freeze_start_up_objects
from router.messaging.completions import Notifier
from router.messaging.redis_clients import warn_if_redis_may_evict
from router.runtime import Runtime
from router.settings import get_settings

from .call_limits import limits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessState:
    runtime: Runtime
    notifier: Notifier
    # Names this process in the audit log.
    actor: str


_state: ProcessState | None = None
_building = threading.Lock()


def current() -> ProcessState:
    """This process's runtime (settings, database, broker) and notifier."""
    global _state
    state = _state
    if state is not None:
        return state
    with _building:
        if _state is None:
            settings = get_settings()
            metrics.enable(settings)
            runtime = Runtime(settings)
            try:
                runtime.prepare(runs_tools=_runs_tools())
                notifier = runtime.notifier()
            except BaseException:
                # Each try builds anew: a failed one must not leave its MCP servers running.
                with contextlib.suppress(Exception):
                    runtime.close()
                raise
            _state = ProcessState(
                runtime, notifier, actor=f"worker@{socket.gethostname()}:{os.getpid()}"
            )
            freeze_start_up_objects()
            log.info("pool process %d ready: %d tools", os.getpid(), len(runtime.registry))
        return _state


def _runs_tools() -> bool:
    """Whether this worker takes calls of tools: it consumes a tool queue, as every worker
    does but the approval and notification workers (Celery counts every queue when none
    was chosen)."""
    return any(name in TOOL_QUEUES for name in current_app.amqp.queues.consume_from)


def _build_ahead() -> None:
    try:
        current()
    except Exception:  # the first task builds them again, and fails as it always has
        log.exception("pool process %d could not start", os.getpid())


@signals.worker_process_init.connect
def _fresh_after_fork(**_: Any) -> None:
    # Never share a parent's database connections with a forked child.
    global _state, _building
    _state, _building = None, threading.Lock()
    # A prefork pool process: it keeps the time limits of each call it runs.
    limits.enable()
    threading.Thread(target=_build_ahead, name="toolrouter-start", daemon=True).start()


# Celery's line per task received and succeeded: the audit log and Flower hold every task.
TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace")
# httpx's line per request: the audit log holds every call, and the URL may hold a secret.
REQUEST_LOGGERS = ("httpx",)


@signals.after_setup_logger.connect
def _quiet_task_lines(**_: Any) -> None:
    for name in TASK_LOGGERS + REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@signals.worker_init.connect
def _check_start(**_: Any) -> None:
    """In the worker's main process, before the pool starts: refuse a tool config that
    does not load, and warn once about a Redis that may evict queued messages."""
    runtime = Runtime(get_settings())
    try:
        # The configured tools only: importing MCP servers' tools would start their
        # sessions in this process, just before the pool forks.
        runtime.tool_config  # noqa: B018 (loading it is the check)
    except ConfigError as exc:
        log.critical("refusing to start the worker: %s", exc)
        # SystemExit, not an Exception: Celery's signal dispatch logs and swallows those.
        raise SystemExit(2) from None
    finally:
        runtime.close()
    warn_if_redis_may_evict(runtime.redis_url)
    # Before the pool forks: its processes inherit the frozen set.
    freeze_start_up_objects()
