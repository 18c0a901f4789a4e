"""Publishing run messages by task name, many at a time (``message_builder``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from celery import Celery

from ..errors import BrokerUnavailable
from ..threads import MAX_THREADS
from .celery_app import HARD_LIMIT_GRACE_S
from .message_builder import MessageBuilder, pack, push
from .run_message import RunMessage

# Tries of a publish before Redis is taken to be down.
TRIES = 2
# Connections the channel may hold at once: one per thread publishing, more than every
# thread of the API's pool, or a burst of keyed submissions is refused by redis-py.
MAX_CONNECTIONS = MAX_THREADS + 24


class Publisher:
    """Publishes run messages by task name. Raises ``BrokerUnavailable`` when Redis is down.

    It keeps one broker connection and channel of its own rather than borrowing Celery's
    producer for each publish: borrowing and returning one costs about as much CPU as the
    rest of a lone call's publish. The channel's redis-py client is thread-safe and takes a
    pooled connection per command, so every thread publishes through it."""

    def __init__(
        self, app: Celery, *, hard_limit_grace_s: float = HARD_LIMIT_GRACE_S, spread: int = 1
    ) -> None:
        self.app = app
        self.hard_limit_grace_s = hard_limit_grace_s
        # Calls of one tool published together go out in at least this many messages.
        self.spread = spread
        self.builder = MessageBuilder(app, hard_limit_grace_s)
        self._lock = threading.Lock()
        self._connection: Any = None
        self._channel: Any = None
        # Connects finished so far, and the last one's failure (its number, why).
        self._connects = 0
        self._failure: tuple[int, str] | None = None

    def publish(self, messages: Sequence[RunMessage]) -> None:
        if not messages:
            return
        packed = pack(messages, self.spread)
        # A duplicated message is harmless (a run starts with a conditional claim), a lost
        # one waits for the reconciler: a failed push is simply tried again, on a new
        # channel. A failed connect is not: kombu has already tried it for a while.
        for attempt in range(TRIES):
            channel = self._open_channel()
            try:
                push(self.builder, channel, packed)
                return
            except Exception as exc:  # kombu and redis-py raise many types for "Redis is down"
                self._forget(channel)
                if attempt == TRIES - 1:
                    raise BrokerUnavailable(f"broker: {exc}") from None

    def close(self) -> None:
        with self._lock:
            connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            connection.release()

    def _open_channel(self) -> Any:
        """The channel, opened by one thread at a time. The threads that waited for a
        connect share its failure (``BrokerUnavailable``) rather than each trying again in
        turn, waiting out Redis's timeout while holding a thread of the API's pool."""
        channel = self._channel
        if channel is not None:
            return channel
        seen = self._connects
        with self._lock:
            if self._channel is not None:
                return self._channel
            failure = self._failure
            if failure is not None and failure[0] > seen:
                raise BrokerUnavailable(failure[1])  # the connect this thread waited for
            try:
                connection = self.app.connection_for_write(
                    transport_options={"max_connections": MAX_CONNECTIONS}
                )
                channel = connection.default_channel
            except Exception as exc:  # as in ``publish``
                self._connects += 1
                self._failure = (self._connects, f"broker: {exc}")
                raise BrokerUnavailable(f"broker: {exc}") from None
            self._connects += 1
            self._connection, self._channel, self._failure = connection, channel, None
            return channel

    def _forget(self, channel: Any) -> None:
        """After a failure the next try starts from a new connection, as a borrowed producer
        would. The old one is dropped, not closed: another thread may be using it."""
        with self._lock:
            if self._channel is channel:  # not one another thread has opened since
                self._connection, self._channel = None, None
