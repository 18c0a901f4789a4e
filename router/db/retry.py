"""A database that stops answering for a moment (its connection ended, a failover under
way) mostly answers again within seconds: work already done (a run's outcome, an accepted
call) is worth those seconds rather than being lost to a first refusal."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from kombu.utils.functional import retry_over_time

from ..errors import StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a brief outage is waited out where nothing else bounds the wait.
BRIEF_OUTAGE_S = 5.0
# The longest pause between two tries.
MAX_PAUSE_S = 1.0


def retried(fun: Callable[[], T], *, within_s: float, what: str) -> T:
    """``fun()``, tried again while it raises ``StoreUnavailable``, no try starting later
    than ``within_s`` seconds from now; then its error. Each refusal is logged, naming
    ``what`` was not done."""
    # kombu starts one more try after a pause once its timeout is past.
    timeout = within_s - MAX_PAUSE_S
    if timeout <= 0:
        return fun()

    def noted(exc: BaseException, intervals: Iterator[float], tries: int) -> float:
        wait = next(intervals)
        log.warning("could not %s (%s); trying again in %.2f s", what, exc, wait)
        return wait

    result: T = retry_over_time(
        fun,
        StoreUnavailable,
        errback=noted,
        interval_start=0.05,
        interval_step=0.25,
        interval_max=MAX_PAUSE_S,
        timeout=timeout,
    )
    return result
