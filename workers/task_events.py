"""Task events published in timed batches, so that a watching Flower costs the worker little.

Celery's worker buffers task events and publishes the buffer on the next turn of its event
loop: with few tasks in flight, that is a Redis ``PUBLISH`` per event (three per task), each
a round trip made in the consumer loop, between taking a message and running it. Here the
buffer goes out at most every ``EVENTS_FLUSH_S``, as one message of all the events buffered
(Celery's ``task.multi``, which Flower and every Celery event receiver read as the events one
by one, each with its own timestamp), or at once when it reaches Celery's buffer limit.
"""

from __future__ import annotations

from celery.worker.consumer import Consumer

# Flower shows each event's own timestamp, so the delay changes what it shows by nothing
# but when it appears.
EVENTS_FLUSH_S = 0.1


class BatchedEventsConsumer(Consumer):
    """Celery's consumer, publishing buffered task events on a timer."""

    _events_flush_due = False

    def on_send_event_buffered(self) -> None:
        if self.hub is None or self._events_flush_due:
            return
        self._events_flush_due = True
        self.hub.call_later(EVENTS_FLUSH_S, self._flush_events_due)

    def _flush_events_due(self) -> None:
        self._events_flush_due = False
        self._flush_events()

    def shutdown(self) -> None:
        # What is still buffered goes out before the dispatcher closes, as Celery's would.
        try:
            self._flush_events()
        finally:
            super().shutdown()
