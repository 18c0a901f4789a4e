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


def retried(fun: Callable[[], T], *, within_s: float, what: str) -> T:
    """``fun()``, tried again while it raises ``StoreUnavailable`` for up to ``within_s``
    seconds, then its error; each refusal is logged, naming ``what`` was not done."""
    if within_s <= 0:
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
        interval_max=1.0,
        timeout=within_s,
    )
    return result
