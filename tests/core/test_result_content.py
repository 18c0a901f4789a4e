"""Content blocks of a result (SPEC §4 ``content``) in the system of record: stored with the
value in the one statement that finishes the call, read back by every reader, and carried
by the completion notice only when the whole answer fits it. Real databases and Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from router.constants import CALL_DONE_CHANNEL
from router.messaging.completions import MAX_RESULT_BYTES, parse_completion
from router.results import CallResult
from router.runtime import Runtime
from workers.execution import Executor
from workers.handlers import Outcome

from ..support.calls import queue_call

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


@pytest.fixture
def heard(runtime: Runtime) -> Iterator[redis.client.PubSub]:
    client = redis.Redis.from_url(runtime.redis_url)
    subscription = client.pubsub(ignore_subscribe_messages=True)
    subscription.subscribe(runtime.namespace.key(CALL_DONE_CHANNEL))
    yield subscription
    subscription.close()
    client.close()


def finish_with(runtime: Runtime, outcome: Outcome) -> str:
    """Queue an ``echo`` call, claim it as a worker would and record ``outcome`` for it."""
    call_id = queue_call(runtime, "echo", {})
    notifier = runtime.notifier()
    executor = Executor(runtime, notifier, actor="test-worker")
    try:
        with runtime.store.transaction() as conn:
            row = runtime.store.claim(
                conn, call_id, now=runtime.clock(), lease_ms=executor.lease_ms("echo")
            )
        assert row is not None
        assert executor.finish(row, outcome) == "ok"
    finally:
        notifier.client.close()
    return call_id


def stored(runtime: Runtime, call_id: str) -> CallResult:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row.result()


def announced(subscription: redis.client.PubSub, runtime: Runtime) -> tuple[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = subscription.get_message(timeout=1.0)
        if message is not None:
            parsed = parse_completion(message["data"], runtime.keyring)
            assert parsed is not None
            return parsed
    raise AssertionError("no completion announced")


def test_content_is_stored_with_the_value_and_announced_with_it(
    runtime: Runtime, heard: redis.client.PubSub
) -> None:
    blocks = [{"type": "text", "text": "a chart"}, IMAGE]
    call_id = finish_with(runtime, Outcome.of_value("a chart", max_nesting=64, content=blocks))

    result = stored(runtime, call_id)
    assert (result.value, result.content) == ("a chart", blocks)
    assert result.to_dict() == {
        "ok": True,
        "call_id": call_id,
        "tool": "echo",
        "status": "succeeded",
        "value": "a chart",
        "content": blocks,
    }
    # What rides the notice is what a read of the row answers.
    assert announced(heard, runtime) == (call_id, result)


def test_content_too_large_to_ride_is_announced_by_id_and_read_whole_from_the_row(
    runtime: Runtime, heard: redis.client.PubSub
) -> None:
    blocks = [{"type": "audio", "data": "A" * MAX_RESULT_BYTES, "mimeType": "audio/wav"}]
    call_id = finish_with(runtime, Outcome.of_value("", max_nesting=64, content=blocks))

    assert announced(heard, runtime) == (call_id, None)
    assert stored(runtime, call_id).content == blocks


def test_a_value_without_content_reads_back_without_it(
    runtime: Runtime, heard: redis.client.PubSub
) -> None:
    call_id = finish_with(runtime, Outcome.of_value({"n": 1}, max_nesting=64))

    result = stored(runtime, call_id)
    assert result.content is None and "content" not in result.to_dict()
    assert announced(heard, runtime) == (call_id, result)
