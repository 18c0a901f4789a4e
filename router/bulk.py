"""Publishing run messages: Celery's own messages, sent in Redis pipelines.

``Celery.send_task`` costs a Redis round trip and a few hundred microseconds of routing,
signals, entity copies and ``saferepr`` of the arguments per message (17 % of the API's
CPU per call in the benchmark's profile). Here each message is built by Celery
(``app.amqp.create_task_message``, the same protocol-2 message ``send_task`` sends, with
the display reprs given rather than computed) and published by kombu (the same envelope)
to the queue through the default exchange, as ``send_task`` itself does for a direct
queue, inside kombu's ``Producer.batch`` so a batch's pushes go out in pipelines.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from kombu.utils.uuid import uuid

from .constants import RUN_CALL_TASK

if TYPE_CHECKING:
    from celery import Celery

    from .broker import RunMessage

# Redis commands buffered per pipeline.
PIPELINE_SIZE = 1000
# A failed bulk publish is tried again this many times: a duplicated message is harmless
# (a run starts with a conditional claim), a lost one waits for the reconciler.
TRIES = 2


def _pipelined(producer: Any) -> AbstractContextManager[Any]:
    """kombu >= 5.7 buffers publishes in pipelines; older kombu publishes one by one."""
    batch = getattr(producer, "batch", None)
    return nullcontext() if batch is None else batch(max_size=PIPELINE_SIZE)


def publish_many(app: Celery, messages: Sequence[RunMessage], *, hard_limit_grace_s: float) -> None:
    """Publish ``messages``; raises whatever kombu or redis-py raise when Redis is down."""
    for attempt in range(TRIES):
        try:
            _publish(app, messages, hard_limit_grace_s)
            return
        except Exception:
            if attempt == TRIES - 1:
                raise


def _publish(app: Celery, messages: Sequence[RunMessage], grace: float) -> None:
    serializer = app.conf.task_serializer
    with app.producer_or_acquire() as producer, _pipelined(producer):
        for message in messages:
            args, kwargs = [message.call_id], {"tool": message.tool}
            headers, properties, body, _ = app.amqp.create_task_message(
                uuid(),
                RUN_CALL_TASK,
                args,
                # The tool name rides along for Flower and logs; arguments never do.
                kwargs,
                countdown=message.countdown,
                soft_time_limit=message.timeout_s,
                time_limit=message.timeout_s + grace,
                ignore_result=True,
                # What Flower shows; plain repr is enough for an id and a tool name.
                argsrepr=repr(args),
                kwargsrepr=repr(kwargs),
            )
            producer.publish(
                body,
                exchange="",
                routing_key=message.queue,
                serializer=serializer,
                headers=headers,
                # The queues are declared by the workers; the push creates the list anyway.
                declare=[],
                retry=False,
                delivery_mode=2,
                **properties,
            )
