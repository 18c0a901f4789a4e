"""The calls an API process has published and not yet heard finish: how much work it has
already given the workers. ``router.dispatch.group_commit`` holds a small group back while there
is enough of it (see there for why).

Only the process's completion listener tells it that a call finished. A completion it
never hears (the listener between two Redis connections, a call that waits on a rate
limit, a slow tool) must not keep the count up for ever: a call is forgotten after
``forget_after_s``, which errs towards holding less, never more. A completion heard
before the call's publish is counted (a quick call, its worker faster than the event
loop's return to the group that published it) is asked of the listener (``heard``), so
it is not counted as in flight for those seconds: counted, enough of them would make
lone callers wait out the whole hold.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

# Long enough for a call to cross a busy queue, short enough that a lost completion
# stops counting soon.
FORGET_AFTER_S = 2.0


class InFlight:
    """Call ids in the order they were published, each with when. Used from one event
    loop (the API's), with no lock."""

    def __init__(
        self,
        *,
        on_finished: Callable[[int], None] | None = None,
        heard: Callable[[str], bool] | None = None,
        forget_after_s: float = FORGET_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_finished`` is called with the count each time a completion lowers it;
        ``heard`` says whether a call's completion was heard already (the process's
        ``CompletionListener``)."""
        self.forget_after_s, self.clock = forget_after_s, clock
        self._since: OrderedDict[str, float] = OrderedDict()
        self.on_finished, self.heard = on_finished, heard

    def published(self, call_ids: Iterable[str]) -> None:
        now, heard = self.clock(), self.heard
        for call_id in call_ids:
            if heard is None or not heard(call_id):
                self._since[call_id] = now
        self._forget(now)  # here too, so nothing grows while nobody counts

    def finished(self, call_id: str) -> None:
        """A completion was heard; calls this process never published are ignored."""
        if self._since.pop(call_id, None) is not None and self.on_finished is not None:
            self.on_finished(self.count())

    def count(self) -> int:
        self._forget(self.clock())
        return len(self._since)

    def _forget(self, now: float) -> None:
        cutoff = now - self.forget_after_s
        since = self._since
        while since:
            oldest = next(iter(since.values()))
            if oldest > cutoff:
                break
            since.popitem(last=False)
