"""Group commit: the single submissions an API process has in flight at once share one
write transaction and one publish.

Under load an API process has many ``POST /v1/calls`` in flight. Each used to take a
thread of its own, a write transaction of its own (SQLite lets one writer in at a time,
so they queued on the lock anyway, polling it; PostgreSQL serialises them on the audit
chain's lock) and a Redis round trip of its own. Here they queue on the event loop, and
one thread at a time accepts whatever has queued through ``Dispatcher.submit_many``: a
lone call goes alone, as before, and while one group is being committed the next one
gathers. Each call is still checked, stored, audited and answered on its own.

Calls with an idempotency key do not queue: each is settled against what is stored, in a
thread of its own, as before, so a slow one holds up no one else.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from .dispatcher import Dispatcher, Submission
from .results import CallResult, error_message, unavailable
from .threads import blocking

# Calls per transaction at most; more wait for the next group.
MAX_GROUP = 128


Waiting = list[tuple[Submission, "asyncio.Future[CallResult]"]]


@dataclass(eq=False)
class _Queue:
    """What waits on one event loop, and the task accepting it."""

    waiting: Waiting = field(default_factory=list)
    draining: asyncio.Task[None] | None = None


class GroupCommit:
    """Accepts submissions in groups, one group at a time per event loop."""

    def __init__(self, dispatcher: Callable[[], Dispatcher], *, max_group: int = MAX_GROUP):
        # A callable: the dispatcher is built on first use (after start-up checked the config).
        self._dispatcher = dispatcher
        self.max_group = max_group
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = (
            weakref.WeakKeyDictionary()
        )

    async def submit(self, item: Submission) -> CallResult:
        """``item``'s answer, as ``Dispatcher.submit`` gives it. If the caller goes away
        meanwhile, the call is still submitted; only its answer is dropped."""
        if item.idempotency_key is not None:
            dispatcher = self._dispatcher()
            return await blocking(
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
        return await future

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
                _answer_all(queue.waiting, unavailable("the API is shutting down"))
                queue.waiting.clear()
        if current:
            queue.draining = None
            if queue.waiting and not loop.is_closed():
                # Queued after the task's last look and before this callback.
                self._start_draining(queue, loop)

    async def _drain(self, queue: _Queue, accepting: Waiting) -> None:
        while queue.waiting:
            accepting[:] = group = queue.waiting[: self.max_group]
            del queue.waiting[: self.max_group]
            try:
                results = await blocking(
                    self._dispatcher().submit_many, [item for item, _ in group]
                )
                answers = [
                    (future, result) for (_, future), result in zip(group, results, strict=True)
                ]
            except Exception as exc:  # submit_many never raises; the thread pool might
                failed = unavailable(f"internal error: {error_message(exc)}")
                answers = [(future, failed) for _, future in group]
            for future, result in answers:
                if not future.done():  # cancelled: its caller went away
                    future.set_result(result)
            accepting.clear()


def _answer_all(waiting: Waiting, answer: CallResult) -> None:
    for _, future in waiting:
        if not future.done():
            future.set_result(answer)
