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
# How long a publish waits for another thread's connect before answering that Redis does
# not answer: the threads waiting would otherwise hold the pool that serves reads too.
CONNECT_WAIT_S = 2.0


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

    def publish(self, messages: Sequence[RunMessage]) -> None:
        if not messages:
            return
        packed = pack(messages, self.spread)
        # A duplicated message is harmless (a run starts with a conditional claim), a lost
        # one waits for the reconciler: a failed publish is simply tried again.
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
        """The channel, opened by one thread at a time; ``BrokerUnavailable`` when it cannot
        be, or when another thread's connect takes too long."""
        channel = self._channel
        if channel is not None:
            return channel
        if not self._lock.acquire(timeout=CONNECT_WAIT_S):
            raise BrokerUnavailable("broker: not answering (a connection is being opened)")
        try:
            if self._channel is None:
                try:
                    connection = self.app.connection_for_write(
                        transport_options={"max_connections": MAX_CONNECTIONS}
                    )
                    self._channel = connection.default_channel
                except Exception as exc:  # as in ``publish``
                    raise BrokerUnavailable(f"broker: {exc}") from None
                self._connection = connection
            return self._channel
        finally:
            self._lock.release()

    def _forget(self, channel: Any) -> None:
        """After a failure the next try starts from a new connection, as a borrowed producer
        would. The old one is dropped, not closed: another thread may be using it."""
        with self._lock:
            if self._channel is channel:  # not one another thread has opened since
                self._connection, self._channel = None, None
