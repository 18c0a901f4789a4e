"""The long-lived objects of one worker process, built on first use after the pool forked."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from celery import signals

from router.notify import Notifier
from router.runtime import Runtime
from router.settings import get_settings


@dataclass(frozen=True)
class ProcessState:
    runtime: Runtime
    notifier: Notifier
    # Names this process in the audit log.
    actor: str


_state: ProcessState | None = None


def current() -> ProcessState:
    """This process's runtime (settings, database, broker) and notifier."""
    global _state
    if _state is None:
        runtime = Runtime(get_settings())
        runtime.prepare()
        _state = ProcessState(
            runtime,
            Notifier(runtime.redis_url),
            actor=f"worker@{socket.gethostname()}:{os.getpid()}",
        )
    return _state


@signals.worker_process_init.connect
def _fresh_after_fork(**_: Any) -> None:
    # Never share a parent's database connections with a forked child.
    global _state
    _state = None
