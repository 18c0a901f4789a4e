"""Group commit: the single submissions an API process has in flight at once share one
write transaction and one publish.

Under load an API process has many ``POST /v1/calls`` in flight. Taken one by one, each
would need a thread of its own, a write transaction of its own (SQLite lets one writer in
at a time, so they would queue on the lock anyway, polling it; PostgreSQL serialises them
on the audit chain's lock) and a Redis round trip of its own. Here they queue on the
event loop, and one thread at a time accepts whatever has queued through
``Dispatcher.submit_many``: a lone call goes alone, and while one group is being
committed the next one gathers. Each call is still checked, stored, audited and answered
on its own.

Calls with an idempotency key do not queue: each is settled against what is stored, in a
thread of its own, so a slow one holds up no one else.

A small group can be held back for a moment (``hold_s``), as Nagle's algorithm holds a
small TCP segment while earlier data is unacknowledged. Under a steady load the calls
arrive one at a time, at the rate the workers finish earlier ones, and left alone each
group is one or two calls: each its own transaction, its own message and a worker's whole
per-message cost. So while this process has at least ``busy`` calls published and not
finished (``router.dispatch.in_flight``: the workers have that much to do already), a group
smaller than ``full`` waits until it is full, until enough of those calls finish that
fewer than ``busy`` are left, or ``hold_s`` at most. A lone caller never waits: nothing of
its own is in flight. One caller sending call after call while its earlier calls still run
(fire and forget into a backlog) waits once per ``quiet_s`` at most: a hold that ran out
with nothing else arriving gathered nothing, so no group is held for ``quiet_s``, or until
calls arrive together (two queued at once, or one arriving while a group is accepted).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from ..results import SHUTTING_DOWN, CallResult, internal_error, unavailable
from ..status import CallStatus
from ..threads import in_thread
from .dispatcher import Dispatcher
from .in_flight import InFlight
from .submission import Submission

# Calls per transaction at most; more wait for the next group.
MAX_GROUP = 128
# After a hold that gathered nothing, how long no group is held (unless calls arrive
# together): a caller alone pays one hold in this long, a steady load soon holds again.
QUIET_S = 1.0


Waiting = list[tuple[Submission, "asyncio.Future[CallResult]"]]


@dataclass(eq=False)
class _Queue:
    """What waits on one event loop, and the task accepting it."""

    waiting: Waiting = field(default_factory=list)
    draining: asyncio.Task[None] | None = None
    # Set to end a hold early: the group is full, or the workers are running short.
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Until when (event loop time) no group is held: the last hold gathered nothing.
    quiet_until: float = 0.0


class GroupCommit:
    """Accepts submissions in groups, one group at a time per event loop."""

    def __init__(
        self,
        dispatcher: Callable[[], Dispatcher],
        *,
        max_group: int = MAX_GROUP,
        hold_s: float = 0.0,
        full: int = 16,
        busy: int | None = None,
        quiet_s: float = QUIET_S,
        heard: Callable[[str], bool] | None = None,
    ):
        # A callable: the dispatcher is built on first use (after start-up checked the config).
        self._dispatcher = dispatcher
        self.max_group = max_group
        self.hold_s, self.full, self.quiet_s = hold_s, full, quiet_s
        self.busy = full if busy is None else busy
        # Told of completions by the process's listener (``CompletionListener``); with
        # none, the calls are forgotten after a while and the hold ends by its timeout.
        self.in_flight = InFlight(on_finished=self._workers_short, heard=heard)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = (
            weakref.WeakKeyDictionary()
        )

    async def submit(self, item: Submission) -> CallResult:
        """``item``'s answer, as ``Dispatcher.submit`` gives it. If the caller goes away
        meanwhile, the call is still submitted; only its answer is dropped."""
        if item.idempotency_key is not None:
            dispatcher = self._dispatcher()
            return await in_thread(
                dispatcher.submit, item.requested_by, item.tool, item.args, item.idempotency_key
            )
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        future: asyncio.Future[CallResult] = loop.create_future()
        queue.waiting.append((item, future))
        if queue.draining is None or queue.draining.done():
            self._start_draining(queue, loop)
        elif len(queue.waiting) >= self.full:
            queue.wake.set()
        return await future

    def _workers_short(self, in_flight: int) -> None:
        """A completion was heard: a held group goes once fewer than ``busy`` are left."""
        if in_flight >= self.busy:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, queue in list(self._queues.items()):
            if loop is running:
                queue.wake.set()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(queue.wake.set)

    def _should_hold(self, queue: _Queue) -> bool:
        return (
            self.hold_s > 0
            and asyncio.get_running_loop().time() >= queue.quiet_until
            and len(queue.waiting) < self.full
            and self.in_flight.count() >= self.busy
        )

    async def _hold(self, queue: _Queue) -> None:
        queue.wake.clear()
        held = len(queue.waiting)
        try:
            async with asyncio.timeout(self.hold_s):
                await queue.wake.wait()
        except TimeoutError:
            if len(queue.waiting) == held:
                queue.quiet_until = asyncio.get_running_loop().time() + self.quiet_s

    def _start_draining(self, queue: _Queue, loop: asyncio.AbstractEventLoop) -> None:
        accepting: Waiting = []  # the group in the drain task's hands
        task = loop.create_task(self._drain(queue, accepting))
        queue.draining = task
        task.add_done_callback(functools.partial(self._drained, queue, accepting, loop))

    def _drained(
        self,
        queue: _Queue,
        accepting: Waiting,
        loop: asyncio.AbstractEventLoop,
        task: asyncio.Task[None],
    ) -> None:
        """When a drain task ends. It is only cancelled when the loop shuts down (perhaps
        before it even started): then nobody is left hanging, on its group or behind it."""
        current = queue.draining is task
        if task.cancelled() or task.exception() is not None:
            _answer_all(accepting, unavailable("the API shut down while accepting this call"))
            if current:
                _answer_all(queue.waiting, unavailable(SHUTTING_DOWN))
                queue.waiting.clear()
        if current:
            queue.draining = None
            if queue.waiting and not loop.is_closed():
                # Queued after the task's last look and before this callback.
                self._start_draining(queue, loop)

    async def _drain(self, queue: _Queue, accepting: Waiting) -> None:
        first = True
        while queue.waiting:
            # Calls queued together, or while the last group was accepted: worth holding.
            if len(queue.waiting) > 1 or not first:
                queue.quiet_until = 0.0
            first = False
            if self._should_hold(queue):
                await self._hold(queue)
            accepting[:] = group = queue.waiting[: self.max_group]
            del queue.waiting[: self.max_group]
            try:
                results = await in_thread(
                    self._dispatcher().submit_many, [item for item, _ in group]
                )
                answers = [
                    (future, result) for (_, future), result in zip(group, results, strict=True)
                ]
                self.in_flight.published(
                    r.call_id for r in results if r.status == CallStatus.QUEUED and r.call_id
                )
            except Exception as exc:  # submit_many never raises; the thread pool might
                failed = unavailable(internal_error(exc))
                answers = [(future, failed) for _, future in group]
            for future, result in answers:
                if not future.done():  # cancelled: its caller went away
                    future.set_result(result)
            accepting.clear()


def _answer_all(waiting: Waiting, answer: CallResult) -> None:
    for _, future in waiting:
        if not future.done():
            future.set_result(answer)
