"""Run messages built from templates are the messages Celery and kombu would send.

The end-to-end suites run these messages through real workers; this pins the bytes: a
templated message equals one built in full by Celery and kombu for the same call, except
for the ids that must differ from message to message.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from router.broker import Publisher, RunMessage, make_celery
from router.bulk import _envelope, _task_message

from . import services


@pytest.fixture
def publisher(redis_base: str) -> Publisher:
    """kombu's Redis channel pings on creation; nothing is ever sent."""
    url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    return Publisher(make_celery(url), hard_limit_grace_s=10.0)


def built(publisher: Publisher, message: RunMessage) -> dict[str, Any]:
    with publisher.app.connection_for_write() as conn:
        key, payload = publisher.builder.build(conn.default_channel, message)
    assert key == message.queue
    return dict(json.loads(payload))


def in_full(publisher: Publisher, message: RunMessage, task_id: str) -> dict[str, Any]:
    headers, properties, body, _ = _task_message(publisher.app, message, 10.0, task_id)
    with publisher.app.connection_for_write() as conn:
        _, payload = _envelope(
            conn.default_channel, message, headers, properties, json.dumps(body).encode()
        )
    return dict(json.loads(payload))


def test_a_templated_message_is_the_full_message_with_its_own_ids(publisher: Publisher) -> None:
    first = RunMessage(call_id="call_" + "a" * 32, tool="echo", queue="tools.low", timeout_s=30)
    second = RunMessage(call_id="call_" + "b" * 32, tool="echo", queue="tools.low", timeout_s=30)
    one, two = built(publisher, first), built(publisher, second)
    for message, got in ((first, one), (second, two)):
        task_id = got["headers"]["id"]
        assert got["headers"]["root_id"] == got["properties"]["correlation_id"] == task_id
        args, kwargs, _ = json.loads(base64.b64decode(got["body"]))
        assert args == [message.call_id] and kwargs == {"tool": "echo"}
        assert got["headers"]["argsrepr"] == repr([message.call_id])
        assert got["headers"]["timelimit"] == [40.0, 30.0]
        expected = in_full(publisher, message, task_id)
        tag = got["properties"].pop("delivery_tag")
        expected["properties"].pop("delivery_tag")
        assert tag
        assert got == expected
    assert one["headers"]["id"] != two["headers"]["id"]


def test_messages_with_a_countdown_carry_their_eta(publisher: Publisher) -> None:
    message = RunMessage(
        call_id="call_c", tool="echo", queue="tools.high", timeout_s=5, countdown=3
    )
    got = built(publisher, message)
    assert got["headers"]["eta"] is not None
    assert got["properties"]["delivery_info"]["routing_key"] == "tools.high"
