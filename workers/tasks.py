"""The Celery tasks: thin, named, taking ids. The logic is in ``workers.execution``."""

from __future__ import annotations

import logging
from typing import Any

from celery import signals
from celery.exceptions import TimeLimitExceeded

from router import metrics
from router.constants import REAP_TASK, RECONCILE_TASK, RUN_CALL_TASK
from router.ids import is_call_id
from router.metrics import Untrusted

from . import process
from .app import app
from .execution import Executor, RunOutcome

log = logging.getLogger(__name__)


def executor() -> Executor:
    state = process.current()
    return Executor(state.runtime, state.notifier, actor=state.actor)


@app.task(name=RUN_CALL_TASK, ignore_result=True)
def run_call(*call_ids: str, tool: str | None = None) -> RunOutcome | list[RunOutcome]:
    """Run the calls ``call_ids`` (usually one; several calls of ``tool`` may share a
    message, see ``message_builder.pack``); ``tool`` is a hint for the lease and for Flower."""
    runner = executor()  # also sets up this process's metrics
    if not call_ids or not all(map(is_call_id, call_ids)) or not isinstance(tool, str | None):
        # No API process sends these: nothing to run, and nothing of them worth a traceback.
        metrics.untrusted(Untrusted.RUN_MESSAGE)
        log.warning("ignored a run message that names no call")
        return RunOutcome.DROPPED
    if len(call_ids) == 1:
        # Alone in its message: Celery's own soft and hard time limits apply.
        return runner.run(call_ids[0], tool)
    return runner.run_many(call_ids, tool)


@app.task(name=REAP_TASK, ignore_result=True)
def reap_lost_runs() -> dict[RunOutcome, int]:
    return executor().reap()


@app.task(name=RECONCILE_TASK, ignore_result=True)
def reconcile_queued() -> int:
    return executor().reconcile()


@signals.task_failure.connect(sender=run_call)
def _on_run_failure(
    task_id: str | None = None, exception: BaseException | None = None, args: Any = None, **_: Any
) -> None:
    # Fires in the worker's main process when Celery's hard limit killed a pool process:
    # only if the call's own limits (``workers.call_limits``) could not end it first.
    if isinstance(exception, TimeLimitExceeded) and args and len(args) == 1:
        try:
            executor().fail_hard_timeout(str(args[0]))
        except Exception:
            log.exception("could not record the hard timeout of %s", args[0])
