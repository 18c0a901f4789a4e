"""The Celery tasks: thin, named, taking ids. The logic is in ``workers.execution``."""

from __future__ import annotations

import logging
from typing import Any

from celery import signals
from celery.exceptions import TimeLimitExceeded

from router.constants import REAP_TASK, RECONCILE_TASK, RUN_CALL_TASK

from . import process
from .app import app
from .execution import Executor

log = logging.getLogger(__name__)


def executor() -> Executor:
    state = process.current()
    return Executor(state.runtime, state.notifier, actor=state.actor)


@app.task(name=RUN_CALL_TASK, ignore_result=True)
def run_call(call_id: str, tool: str | None = None) -> str:
    """Run the call ``call_id``; ``tool`` is only a hint for the lease and for Flower."""
    return executor().run(call_id, tool)


@app.task(name=REAP_TASK, ignore_result=True)
def reap_lost_runs() -> dict[str, int]:
    return executor().reap()


@app.task(name=RECONCILE_TASK, ignore_result=True)
def reconcile_queued() -> int:
    return executor().reconcile()


@signals.task_failure.connect(sender=run_call)
def _on_run_failure(
    task_id: str | None = None, exception: BaseException | None = None, args: Any = None, **_: Any
) -> None:
    # Fires in the worker's main process when the hard time limit killed a handler.
    if isinstance(exception, TimeLimitExceeded) and args:
        try:
            executor().fail_hard_timeout(str(args[0]))
        except Exception:
            log.exception("could not record the hard timeout of %s", args[0])
