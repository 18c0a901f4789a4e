"""Publishing run messages: Celery's own messages, pushed to Redis in pipelines.

``Celery.send_task`` costs a Redis round trip and routing, signals, entity copies and
``saferepr`` per message, and kombu's own publish adds envelope building and double JSON
encoding: a large share of the API's CPU per call, and most of a big batch's time.

So each kind of message is built once by the libraries themselves, as a template: Celery
builds the protocol-2 task message (``app.amqp.create_task_message``, what ``send_task``
sends) for a placeholder call and task id, and kombu's Redis channel prepares and encodes
the envelope (``prepare_message``, ``basic_publish``) exactly as ``Producer.publish``
would, handing over the final ``LPUSH`` payload instead of sending it. A message is then
that payload with its ids, body and delivery tag put in: same bytes as kombu's, at a
small fraction of the cost. Messages with a countdown (retries, rate-limit waits: rare)
are built in full each time, since their ``eta`` differs.

A message may carry several calls of one tool (``pack``): the worker then pays Celery's
per-message work (the consumer loop, the pool's pipe, the trace, task events and Flower)
once for all of them. Its arguments are the call ids, so it is the same task,
``run_call(*call_ids, tool=...)``; ``workers.call_limits`` holds each call to its own time
limits, which Celery can only apply per message.
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kombu.utils.uuid import uuid

from ..constants import RUN_CALL_TASK
from .run_message import Precedence, RunMessage

if TYPE_CHECKING:
    from celery import Celery

# Messages per LPUSH command.
PUSH_SIZE = 1000
# Placeholders: JSON-safe, and never part of a real call id, task id or tool name.
_CALL = "toolrouter0call0placeholder"
_TASK = "toolrouter0task0placeholder"


@dataclass(frozen=True, slots=True)
class _Template:
    """One kind of message (tool, queue, time limits) as a ready ``LPUSH`` payload."""

    key: str
    payload: str
    body: bytes
    delivery_tag: str

    def render(self, call_ids: Sequence[str]) -> str:
        # The placeholder stands for the whole list of ids: quoted as JSON in the body, as
        # Python's repr in ``argsrepr`` (what Flower shows). Ids are plain ASCII.
        listed = '", "'.join(call_ids).encode()
        body = base64.b64encode(self.body.replace(_CALL.encode(), listed)).decode()
        task_id, delivery_tag = _two_uuids()
        return (
            self.payload.replace(_TASK, task_id)
            .replace(_CALL, "', '".join(call_ids))
            .replace(self.delivery_tag, delivery_tag)
            .replace(_BODY_MARK, body)
        )


def _two_uuids() -> tuple[str, str]:
    """Two random (version 4) UUID strings, as kombu's ``uuid()`` makes them, from one read
    of the random source: ``uuid.uuid4()`` built through ``UUID`` is a large share of
    the cost of rendering a message."""
    raw = bytearray(os.urandom(32))
    for at in (6, 22):
        raw[at] = (raw[at] & 0x0F) | 0x40  # version 4
        raw[at + 2] = (raw[at + 2] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.hex()
    return _dashed(text[:32]), _dashed(text[32:])


def _dashed(h: str) -> str:
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# What the template's body is encoded as, until a message puts its own body in.
_BODY_MARK = base64.b64encode(b"toolrouter0body0placeholder").decode()


class _Capture:
    """Stands in for kombu's publish batch: keeps the command instead of sending it."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, tuple[Any, ...]]] = []

    def add(self, name: str, *args: Any) -> None:
        self.commands.append((name, args))


def _task_message(
    app: Celery,
    message: RunMessage,
    grace: float,
    task_id: str,
    call_ids: Sequence[str],
    count: int,
) -> Any:
    """Celery's message running ``call_ids`` (calls of ``message``'s tool), with the time
    limits of a message of ``count`` calls (a template has one placeholder for them all)."""
    args, kwargs = list(call_ids), {"tool": message.tool}
    # Each call's limits are kept by the worker (``workers.call_limits``): Celery's soft
    # limit would strike anywhere, the commit of a finished call's outcome too. Its hard
    # limit only stops a message that somehow outlives all of them.
    hard_limit = count * (message.timeout_s + grace) + grace
    return app.amqp.create_task_message(
        task_id,
        RUN_CALL_TASK,
        args,
        # The tool name rides along for Flower and logs; arguments never do.
        kwargs,
        countdown=message.countdown,
        time_limit=hard_limit,
        ignore_result=True,
        # What Flower shows; plain repr is enough for an id and a tool name.
        argsrepr=repr(args),
        kwargsrepr=repr(kwargs),
    )


def _envelope(
    channel: Any, message: RunMessage, headers: Any, properties: Any, body: bytes
) -> tuple[str, str]:
    """kombu's ``(key, payload)`` for one message, as ``Producer.publish`` would push it."""
    properties = {**properties, "delivery_mode": 2}
    # The priority picks the queue's list (``Precedence``), and a redelivery keeps it.
    prepared = channel.prepare_message(
        body, int(message.precedence), "application/json", "utf-8", headers, properties
    )
    capture = _Capture()
    # The queues are declared by the workers; the default exchange routes by queue name.
    channel.basic_publish(prepared, exchange="", routing_key=message.queue, _publish_batch=capture)
    pushes = [args for name, args in capture.commands if name == "lpush"]
    if len(pushes) != 1 or len(capture.commands) != 1:
        raise RuntimeError(f"unexpected kombu publish commands: {capture.commands!r}")
    key, payload = pushes[0]
    return str(key), str(payload)


def _template(
    app: Celery, channel: Any, message: RunMessage, grace: float, count: int
) -> _Template:
    placeholder = replace(message, call_id=_CALL)
    # One placeholder id in the arguments stands for all ``count`` of them.
    headers, properties, body_obj, _ = _task_message(app, placeholder, grace, _TASK, [_CALL], count)
    body = json.dumps(body_obj).encode()
    key, payload = _envelope(
        channel, placeholder, headers, properties, b"toolrouter0body0placeholder"
    )
    tag = json.loads(payload)["properties"]["delivery_tag"]
    template = _Template(key=key, payload=payload, body=body, delivery_tag=tag)
    # Every placeholder must be where a real value goes, and nowhere else.
    if (
        payload.count(_BODY_MARK) != 1
        or payload.count(tag) != 1
        or body.count(_CALL.encode()) != 1
        or payload.count(f"'{_CALL}'") != payload.count(_CALL)
    ):
        raise RuntimeError("message template does not have the expected shape")
    return template


class MessageBuilder:
    """``(key, payload)`` for run messages, from templates kept per kind of message."""

    def __init__(self, app: Celery, grace: float) -> None:
        self.app, self.grace = app, grace
        self._templates: dict[tuple[str, str, float, Precedence, int], _Template] = {}

    def build(
        self, channel: Any, message: RunMessage, call_ids: Sequence[str] = ()
    ) -> tuple[str, str]:
        """The message for ``message``'s call, or for ``call_ids`` (calls of its tool)."""
        ids = tuple(call_ids) or (message.call_id,)
        if message.countdown:
            headers, properties, body, _ = _task_message(
                self.app, message, self.grace, uuid(), ids, len(ids)
            )
            return _envelope(channel, message, headers, properties, json.dumps(body).encode())
        kind = (message.tool, message.queue, message.timeout_s, message.precedence, len(ids))
        template = self._templates.get(kind)
        if template is None:
            template = _template(self.app, channel, message, self.grace, len(ids))
            self._templates[kind] = template
        return template.key, template.render(ids)


def pack(messages: Sequence[RunMessage], spread: int) -> list[tuple[RunMessage, list[str]]]:
    """The messages to send for ``messages``, each with the call ids it carries.

    Calls of one tool share messages, up to the tool's ``calls_per_message``, but are
    spread over at least ``spread`` messages (a worker's pool processes) when there are
    that many: one message is run by one process, call after call. Sizes are even, and
    calls keep their order. Calls held back by a countdown each go alone, and a batch's
    calls never share a message with others."""
    kinds: dict[tuple[str, str, float, Precedence], list[RunMessage]] = {}
    packed: list[tuple[RunMessage, list[str]]] = []
    for message in messages:
        if message.countdown or message.calls_per_message <= 1:
            packed.append((message, [message.call_id]))
        else:
            kind = (message.tool, message.queue, message.timeout_s, message.precedence)
            kinds.setdefault(kind, []).append(message)
    for same in kinds.values():
        count = max(math.ceil(len(same) / same[0].calls_per_message), min(len(same), spread))
        size, extra = divmod(len(same), count)
        start = 0
        for i in range(count):
            end = start + size + (1 if i < extra else 0)
            packed.append((same[start], [m.call_id for m in same[start:end]]))
            start = end
    return packed


def push(
    builder: MessageBuilder, channel: Any, packed: Sequence[tuple[RunMessage, list[str]]]
) -> None:
    """Push the ``pack``ed messages through ``channel``'s client, in one round trip;
    raises whatever kombu or redis-py raise when Redis is down."""
    by_queue: dict[str, list[str]] = {}
    for message, call_ids in packed:
        key, payload = builder.build(channel, message, call_ids)
        by_queue.setdefault(key, []).append(payload)
    with channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:
        # One LPUSH of many values per queue and chunk: the worker's BRPOP takes them in
        # the order given, as if pushed one by one.
        for key, payloads in by_queue.items():
            for start in range(0, len(payloads), PUSH_SIZE):
                pipe.lpush(key, *payloads[start : start + PUSH_SIZE])
        pipe.execute()
