"""Each call's own time limits, kept by the pool process that runs it.

Celery keeps time limits per message: the pool's main process signals the child at the
soft limit, wherever the child is, and kills it at the hard one. A run is more than its
handler: a soft limit striking the commit of an outcome the handler has produced would
lose that outcome (the call stays running until the reaper runs it again or, if its tool
is not idempotent, marks it ``interrupted``). So no message gets a soft limit from
Celery, and its hard limit only stops a message outliving all its calls
(``message_builder``); the process running the calls, alone in their message or shared
(``message_builder.pack``), keeps each one's limits itself:

- **soft**, at the tool's ``timeout_s``: a watchdog thread signals the main thread, whose
  handler raises Celery's own ``SoftTimeLimitExceeded`` inside the tool's handler, as
  Celery's soft limit does (a blocking system call is interrupted the same way);
- **hard**, ``grace_s`` later, if the handler ignored that: the watchdog calls
  ``on_hard`` (which records the call as timed out and hands a shared message's
  unstarted calls back to the queue) and kills its own process, which the pool replaces;
- and if the watchdog cannot run at all (a handler holding the GIL in C code), the
  kernel's ``ITIMER_REAL``, armed with ``SIGALRM`` at its default action, ends the
  process a moment later anyway; the reaper then recovers the call as a lost run. The
  call's lease is taken for its timeout plus the hard grace plus more, so no run outlives
  its lease.

The soft limit is raised only while a handler runs (``in_handler``): struck anywhere else
(the claim, the outcome's commit, the clean-up here) it waits for the next handler of the
same call, if any. Only prefork pool processes keep these limits (``enable``, at
``worker_process_init``): in a threads or solo pool Celery's own limits do not apply
either, and ending the process would end the whole worker. A handler that sets
``SIGUSR2`` or ``SIGALRM`` itself takes the soft limit or the kernel's backstop from its
own calls; the watchdog's hard limit still ends them.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

log = logging.getLogger(__name__)

SOFT_SIGNAL = signal.SIGUSR2
# The kernel's timer fires this long after the hard limit: time for the watchdog to record
# the timeout first when it can. A call's lease covers it (``Ledger.lease_ms``).
KERNEL_MARGIN_S = 5.0


@dataclass
class _Run:
    soft_at: float
    hard_at: float
    on_hard: Callable[[], None]
    soft_sent: bool = False
    # The soft limit struck outside a handler: raised as the next handler starts.
    soft_pending: bool = False


class CallLimits:
    """One process's watchdog: limits one call at a time, the one its main thread runs."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._run: _Run | None = None
        self._owner_pid: int | None = None
        # When the watchdog, waiting, wakes up by itself (infinity: only when woken).
        self._wake_at = math.inf
        self.enabled = False
        self.in_handler = False

    def enable(self) -> None:
        """Keep per-call limits in this process (a prefork pool process)."""
        self.enabled = True

    def seconds_left(self) -> float | None:
        """Until the hard limit of the run under way; None outside one (no limit kept)."""
        run = self._run
        return None if run is None else run.hard_at - time.monotonic()

    def usable(self) -> bool:
        return (
            self.enabled
            and threading.current_thread() is threading.main_thread()
            and hasattr(signal, "setitimer")
            and hasattr(signal, "pthread_kill")
        )

    def _on_soft_signal(self, _signum: int, _frame: Any) -> None:
        if self.in_handler:
            raise SoftTimeLimitExceeded("soft time limit exceeded")
        run = self._run
        if run is not None:
            run.soft_pending = True

    @contextmanager
    def handler(self) -> Iterator[None]:
        """Around a tool's handler: where the soft limit is raised."""
        run = self._run
        if run is not None and run.soft_pending:
            run.soft_pending = False
            raise SoftTimeLimitExceeded("soft time limit exceeded")
        self.in_handler = True
        try:
            yield
        finally:
            self.in_handler = False

    @contextmanager
    def applied(
        self, timeout_s: float, grace_s: float, on_hard: Callable[[], None]
    ) -> Iterator[None]:
        """Hold the code run inside to ``timeout_s`` (soft) and ``timeout_s + grace_s``."""
        if not self.usable():
            yield
            return
        self._start_watchdog()
        now = time.monotonic()
        previous_soft = signal.signal(SOFT_SIGNAL, self._on_soft_signal)
        previous_alarm = signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, timeout_s + grace_s + KERNEL_MARGIN_S)
        run = _Run(now + timeout_s, now + timeout_s + grace_s, on_hard)
        with self._cond:
            self._run = run
            # Wake the watchdog only if it sleeps past this run's soft limit: waking it for
            # every call of a message would put thread switches on each call.
            if run.soft_at < self._wake_at:
                self._cond.notify()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            # Taken even though nobody is woken: while the watchdog ends this run at its
            # hard limit, the main thread must not go on to the next call.
            with self._cond:
                self._run = None
            signal.signal(signal.SIGALRM, previous_alarm)
            signal.signal(SOFT_SIGNAL, previous_soft)

    def _start_watchdog(self) -> None:
        # A thread does not survive a fork: each pool process starts its own.
        if self._owner_pid == os.getpid():
            return
        self._owner_pid = os.getpid()
        self._cond = threading.Condition()
        self._wake_at = math.inf
        main = threading.main_thread().ident
        assert main is not None
        threading.Thread(target=self._watch, args=(main,), name="call-limits", daemon=True).start()

    def _watch(self, main_ident: int) -> None:
        with self._cond:
            while True:
                run = self._run
                now = time.monotonic()
                if run is None:
                    self._sleep_until(math.inf)
                    continue
                if not run.soft_sent:
                    if now < run.soft_at:
                        self._sleep_until(run.soft_at)
                        continue
                    run.soft_sent = True
                    signal.pthread_kill(main_ident, SOFT_SIGNAL)
                if now < run.hard_at:
                    self._sleep_until(run.hard_at)
                    continue
                # Still this run, past its hard limit; the main thread cannot start another
                # call while this holds the lock.
                try:
                    run.on_hard()
                except Exception:
                    log.exception("could not record a hard timeout")
                finally:
                    log.error("a call outran its hard time limit: ending this process")
                    os.kill(os.getpid(), signal.SIGKILL)

    def _sleep_until(self, deadline: float) -> None:
        """Wait (the lock released) until ``deadline`` or a wake-up; the run may have
        changed meanwhile, so the caller looks again."""
        self._wake_at = deadline
        try:
            self._cond.wait(None if deadline == math.inf else max(0.0, deadline - time.monotonic()))
        finally:
            self._wake_at = math.inf


# One per process; each pool process starts its own watchdog on first use.
limits = CallLimits()
