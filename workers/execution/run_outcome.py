"""What became of one call in this process: the executor's answer, for the worker log."""

from __future__ import annotations

from enum import StrEnum


class RunOutcome(StrEnum):
    """What a run, a shared message or the reaper did with one call."""

    OK = "ok"  # run, its outcome recorded (or held, in a shared message)
    ERROR = "error"  # run and failed, recorded the same way
    RETRY = "retry"  # a retryable failure within its budget: queued again after a backoff
    DROPPED = "dropped"  # not queued any more (a duplicate message, a cancel): not run
    DEFERRED = "deferred"  # over its tool's rate limit: waits in the broker, not run
    FENCED = "fenced"  # its attempt lost the call meanwhile: the outcome dropped
    FAILED = "failed"  # the database or Redis did not answer: left to the reaper or reconciler
    # Its message named another tool than the call's: queued again, under its own tool's.
    MISNAMED = "misnamed"
    # The reaper, for a run whose worker is gone:
    REQUEUED = "requeued"  # queued again (an idempotent tool)
    INTERRUPTED = "interrupted"  # failed as unknown, never run again (any other tool)
    POISONED = "poisoned"  # failed for good: its run was lost too many times
    RACED = "raced"  # nothing: another process recorded the call first


# A call that was not run says nothing about how long its tool's runs take.
NOT_RUN: frozenset[RunOutcome] = frozenset(
    {RunOutcome.DROPPED, RunOutcome.DEFERRED, RunOutcome.MISNAMED}
)
