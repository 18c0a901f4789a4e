"""Group commit: the single submissions an API process has in flight at once share one
write transaction and one publish.

Under load an API process has many ``POST /v1/calls`` in flight. Each used to take a
thread of its own, a write transaction of its own (SQLite lets one writer in at a time,
so they queued on the lock anyway, polling it; PostgreSQL serialises them on the audit
chain's lock) and a Redis round trip of its own. Here they queue on the event loop, and
one thread at a time accepts whatever has queued through ``Dispatcher.submit_many``: a
lone call goes alone, as before, and while one group is being committed the next one
gathers. Each call is still checked, stored, audited and answered on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .dispatcher import Dispatcher, Submission
from .results import CallResult, error_message, unavailable
from .threads import blocking

# Calls per transaction at most; more wait for the next group.
MAX_GROUP = 128


class GroupCommit:
    """Accepts submissions in groups, one group at a time, on the caller's event loop."""

    def __init__(self, dispatcher: Callable[[], Dispatcher], *, max_group: int = MAX_GROUP):
        # A callable: the dispatcher is built on first use (after start-up checked the config).
        self._dispatcher = dispatcher
        self.max_group = max_group
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[Submission, asyncio.Future[CallResult]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def submit(self, item: Submission) -> CallResult:
        """``item``'s answer, as ``Dispatcher.submit`` gives it. If the caller goes away
        meanwhile, the call is still submitted; only its answer is dropped."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (the app restarted in-process): what queued on the old one
            # went with it.
            self._loop, self._waiting, self._draining = loop, [], None
        future: asyncio.Future[CallResult] = loop.create_future()
        self._waiting.append((item, future))
        if self._draining is None:
            self._draining = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._waiting:
                group = self._waiting[: self.max_group]
                del self._waiting[: self.max_group]
                try:
                    results = await blocking(
                        self._dispatcher().submit_many, [item for item, _ in group]
                    )
                    answers = dict(zip((id(f) for _, f in group), results, strict=True))
                except Exception as exc:  # submit_many never raises; the thread pool might
                    failed = unavailable(f"internal error: {error_message(exc)}")
                    answers = {id(future): failed for _, future in group}
                for _, future in group:
                    if not future.done():  # cancelled: its caller went away
                        future.set_result(answers[id(future)])
        finally:
            if self._draining is asyncio.current_task():
                self._draining = None
