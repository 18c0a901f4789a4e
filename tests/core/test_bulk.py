"""The bulk paths: run messages built from templates are the messages Celery and kombu
would send, and many-row inserts store exactly what they are given.

The end-to-end suites run these messages through real workers; this pins the bytes: a
templated message equals one built in full by Celery and kombu for the same call, except
for the ids that must differ from message to message.
"""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
import redis
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from router.db.direct import COPY_MIN_ROWS, insert_rows
from router.db.engine import make_engine
from router.db.schema import calls
from router.messaging.celery_app import make_celery
from router.messaging.message_builder import _envelope
from router.messaging.namespace import PRIORITY_SEPARATOR, Namespace
from router.messaging.publisher import Publisher
from router.messaging.run_message import Precedence, RunMessage
from router.status import CallStatus

from ..support import services


@pytest.fixture
def publisher(redis_base: str) -> Publisher:
    """kombu's Redis channel pings on creation; nothing is ever sent."""
    url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    return Publisher(make_celery(url, Namespace("tr-test")), hard_limit_grace_s=10.0)


def built(
    publisher: Publisher, message: RunMessage, call_ids: list[str] | None = None
) -> dict[str, Any]:
    with publisher.app.connection_for_write() as conn:
        key, payload = publisher.builder.build(conn.default_channel, message, call_ids or ())
    assert key == message.queue
    return dict(json.loads(payload))


def in_full(
    publisher: Publisher, message: RunMessage, task_id: str, call_ids: list[str] | None = None
) -> dict[str, Any]:
    ids = call_ids or [message.call_id]
    hard_limit = len(ids) * (message.timeout_s + 10) + 10
    headers, properties, body, _ = publisher.app.amqp.create_task_message(
        task_id,
        "toolrouter.run_call",
        ids,
        {"tool": message.tool},
        countdown=message.countdown,
        # The worker keeps each call's limits; Celery only stops a message that outlives
        # them all, and sets no soft limit (it would strike the commit of an outcome too).
        time_limit=hard_limit,
        ignore_result=True,
        argsrepr=repr(ids),
        kwargsrepr=repr({"tool": message.tool}),
    )
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
        assert got["headers"]["timelimit"] == [1 * 40 + 10, None]
        expected = in_full(publisher, message, task_id)
        tag = got["properties"].pop("delivery_tag")
        expected["properties"].pop("delivery_tag")
        assert tag
        assert got == expected
    assert one["headers"]["id"] != two["headers"]["id"]


def test_a_message_of_several_calls_is_celerys_message_with_those_call_ids(
    publisher: Publisher,
) -> None:
    message = RunMessage(call_id="call_" + "a" * 32, tool="echo", queue="tools.low", timeout_s=30)
    ids = ["call_" + c * 32 for c in "abc"]
    got = built(publisher, message, ids)
    args, kwargs, _ = json.loads(base64.b64decode(got["body"]))
    assert args == ids and kwargs == {"tool": "echo"}
    assert got["headers"]["argsrepr"] == repr(ids)
    assert got["headers"]["timelimit"] == [3 * 40 + 10, None]
    expected = in_full(publisher, message, got["headers"]["id"], ids)
    got["properties"].pop("delivery_tag")
    expected["properties"].pop("delivery_tag")
    assert got == expected
    # Another size of message is a template of its own; the first is not disturbed.
    pair = built(publisher, message, ids[:2])
    assert json.loads(base64.b64decode(pair["body"]))[0] == ids[:2]
    assert pair["headers"]["timelimit"] == [2 * 40 + 10, None]
    again = json.loads(base64.b64decode(built(publisher, message, ids)["body"]))
    assert again[0] == ids


def test_a_batchs_message_waits_in_its_queues_last_list_and_says_so(
    publisher: Publisher,
) -> None:
    message = RunMessage(
        call_id="call_" + "a" * 32,
        tool="echo",
        queue="tools.low",
        timeout_s=30,
        precedence=Precedence.BATCH,
    )
    with publisher.app.connection_for_write() as conn:
        key, payload = publisher.builder.build(conn.default_channel, message)
    # kombu's list for the priority, and the priority itself for a redelivery.
    assert key == "tools.low" + PRIORITY_SEPARATOR + "9"
    got = json.loads(payload)
    assert got["properties"]["priority"] == 9
    expected = in_full(publisher, message, got["headers"]["id"])
    assert expected["properties"]["priority"] == 9
    got["properties"].pop("delivery_tag")
    expected["properties"].pop("delivery_tag")
    assert got == expected
    interactive = built(publisher, replace(message, precedence=Precedence.INTERACTIVE))
    assert interactive["properties"]["priority"] == 0


def test_messages_with_a_countdown_carry_their_eta(publisher: Publisher) -> None:
    message = RunMessage(
        call_id="call_c", tool="echo", queue="tools.high", timeout_s=5, countdown=3
    )
    got = built(publisher, message)
    assert got["headers"]["eta"] is not None
    assert got["properties"]["delivery_info"]["routing_key"] == "tools.high"


def call_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{i:032x}",
            "tool": "echo",
            "risk": "low",
            "args": '{"i":' + str(i) + "}",
            "args_sha256": "0" * 64,
            "status": CallStatus.QUEUED,
            "requested_by": "agent",
            "idempotency_key": None,
            "attempt": 0,
            "created_at": 1,
            "updated_at": 1,
            "error": "tab\there, newline\\n, backslash \\\\ and é",
        }
        for i in range(start, start + count)
    ]


@pytest.mark.parametrize("count", [3, COPY_MIN_ROWS + 50])
def test_many_rows_land_as_given_and_duplicates_are_integrity_errors(
    database_url: str, count: int
) -> None:
    """Small groups go through executemany, large ones (PostgreSQL) through COPY: both
    store exactly the values given, and both refuse a duplicate key the same way."""
    engine = make_engine(database_url)
    try:
        rows = call_rows(count)
        with engine.begin() as conn:
            insert_rows(conn, calls, rows)
        with engine.connect() as conn:
            stored = conn.execute(select(calls.c.id, calls.c.status, calls.c.error)).all()
        assert sorted((r.id, r.status, r.error) for r in stored) == sorted(
            (r["id"], "queued", r["error"]) for r in rows
        )
        with pytest.raises(IntegrityError), engine.begin() as conn:
            insert_rows(conn, calls, call_rows(count, start=count - 1))
        with engine.connect() as conn:  # the failed transaction left nothing behind
            assert conn.execute(select(func.count()).select_from(calls)).scalar() == count
    finally:
        engine.dispose()


def test_publishes_from_many_threads_at_once_all_arrive_in_order(redis_base: str) -> None:
    """The publisher's one channel serves every thread: no message lost or doubled, and
    each thread's messages leave in the order it published them."""
    url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    services.flush(url)
    namespace = Namespace("tr-test")
    publisher = Publisher(make_celery(url, namespace), hard_limit_grace_s=10.0)
    threads, each = 8, 50

    def publish_from(thread: int) -> None:
        for i in range(each):
            call_id = f"call_{thread:02d}{i:030d}"
            publisher.publish([RunMessage(call_id, "echo", "tools.low", 30.0)])

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(publish_from, range(threads)))
        client = redis.Redis.from_url(url)
        pushed = client.lrange(namespace.prefix + "tools.low", 0, -1)
        client.close()
        # LPUSH puts the newest first: read from the end for the order sent.
        sent = [json.loads(base64.b64decode(json.loads(p)["body"]))[0][0] for p in pushed[::-1]]
        assert len(sent) == threads * each == len(set(sent))
        for thread in range(threads):
            own = [call_id for call_id in sent if call_id.startswith(f"call_{thread:02d}")]
            assert own == sorted(own) and len(own) == each
    finally:
        publisher.close()
        services.flush(url)
