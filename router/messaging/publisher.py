"""Publishing run messages by task name, many at a time (``message_builder``)."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from ..errors import BrokerUnavailable
from .celery_app import HARD_LIMIT_GRACE_S
from .message_builder import MessageBuilder, publish_many
from .run_message import RunMessage


class Publisher:
    """Publishes run messages by task name. Raises ``BrokerUnavailable`` when Redis is down."""

    def __init__(
        self, app: Celery, *, hard_limit_grace_s: float = HARD_LIMIT_GRACE_S, spread: int = 1
    ) -> None:
        self.app = app
        self.hard_limit_grace_s = hard_limit_grace_s
        # Calls of one tool published together go out in at least this many messages.
        self.spread = spread
        self.builder = MessageBuilder(app, hard_limit_grace_s)

    def publish(self, messages: Sequence[RunMessage]) -> None:
        if not messages:
            return
        try:
            publish_many(self.builder, messages, self.spread)
        except Exception as exc:  # kombu and redis-py raise many types for "Redis is down"
            raise BrokerUnavailable(f"broker: {exc}") from None
