"""Publishing run messages by task name, many at a time (``message_builder``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from celery import Celery

from ..errors import BrokerUnavailable
from .celery_app import HARD_LIMIT_GRACE_S
from .message_builder import MessageBuilder, pack, push
from .run_message import RunMessage

# Tries of a publish before Redis is taken to be down.
TRIES = 2


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
            try:
                push(self.builder, self._open_channel(), packed)
                return
            except Exception as exc:  # kombu and redis-py raise many types for "Redis is down"
                self._forget()
                if attempt == TRIES - 1:
                    raise BrokerUnavailable(f"broker: {exc}") from None

    def close(self) -> None:
        with self._lock:
            connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            connection.release()

    def _open_channel(self) -> Any:
        channel = self._channel
        if channel is not None:
            return channel
        with self._lock:
            if self._channel is None:
                connection = self.app.connection_for_write()
                self._channel = connection.default_channel
                self._connection = connection
            return self._channel

    def _forget(self) -> None:
        """After a failure the next try starts from a new connection, as a borrowed producer
        would. The old one is dropped, not closed: another thread may be using it."""
        with self._lock:
            self._connection, self._channel = None, None
