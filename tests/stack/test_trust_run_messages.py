"""Run messages from Redis (SPEC §16: not trusted) that no API process sends: ones that
name no call. The worker runs nothing of them, says so in one log line, no traceback, and
counts them; the next real call runs as ever. Nor does a payload that is no message at all
(or none Celery could take) stop a worker, now or at its next start."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from router.constants import APPROVALS_QUEUE, DECIDE_TASK, RUN_CALL_TASK
from router.messaging.namespace import Namespace

from ..support.redis_attacker import (
    attacker_celery,
    canary_approval,
    redis_client,
    submit,
    untrusted,
)
from ..support.stack import Stack, own_stack

IGNORED = "ignored a run message that names no call"
OWN_REDIS_DB = 10
AGENT = {"agent": ["agent"]}
# What a worker logs for each message from a queue it could not take.
DROPPED = "dropped a message"
CALL_ID = "call_" + "0" * 32
# What someone holding Redis might push onto a tool queue: (call ids, tool).
MALFORMED: list[tuple[list[Any], Any]] = [
    ([], "echo"),
    ([None], "echo"),
    ([{"a": 1}], "echo"),
    (["x" * 100_000], "echo"),
    (["call_" + "0" * 32], {"not": "a tool name"}),
]


def test_run_messages_naming_no_call_run_nothing_and_leave_no_traceback(stack: Stack) -> None:
    counted_before = untrusted(stack, "run_message")
    logged_before = stack.log("worker").count(IGNORED)
    tracebacks_before = stack.log("worker").count("Traceback")

    with attacker_celery(stack) as app:
        for call_ids, tool in MALFORMED:
            app.send_task(
                RUN_CALL_TASK,
                args=call_ids,
                kwargs={"tool": tool},
                queue="tools.low",
                routing_key="tools.low",
            )
    deadline = time.monotonic() + 60
    while stack.log("worker").count(IGNORED) < logged_before + len(MALFORMED):
        assert time.monotonic() < deadline, stack.log("worker")[-2000:]
        time.sleep(0.1)

    assert untrusted(stack, "run_message") == counted_before + len(MALFORMED)
    assert stack.log("worker").count("Traceback") == tracebacks_before
    done = submit(stack, "echo", {"after": "malformed"}, wait_s=30)
    assert (done["status"], done["value"]) == ("succeeded", {"after": "malformed"}), done


def _envelope(app: Celery, queue: str, name: str, body: Any = None, **headers: Any) -> str:
    """A message of task ``name`` as kombu pushes it onto a queue, ``headers`` changed (None
    leaves one out) and ``body`` instead of Celery's."""
    task_id = str(uuid.uuid4())
    message = app.amqp.create_task_message(task_id, name, [CALL_ID], {})
    changed = {**message.headers, **headers}
    encoded = json.dumps([[CALL_ID], {}, {}] if body is None else body).encode()
    return json.dumps(
        {
            "body": base64.b64encode(encoded).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {key: value for key, value in changed.items() if value is not None},
            "properties": {
                "correlation_id": task_id,
                "delivery_info": {"exchange": queue, "routing_key": queue},
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
    )


def _poison(app: Celery, queue: str, name: str) -> list[str]:
    """What someone holding Redis might push that is no message Celery could take."""
    text_limits = {"args": [CALL_ID], "kwargs": {}, "timelimit": ["a", "b"]}
    return [
        "[" * 100_000 + "]" * 100_000,
        "[]",
        json.dumps({"properties": {"delivery_tag": ["not", "hashable"]}}),
        _envelope(app, queue, name, task=["a", "list"]),
        _envelope(app, queue, name, timelimit=["a", "b"]),
        # Celery's older forms, which carry their headers in the body.
        _envelope(app, queue, name, body=text_limits, timelimit=None),
        _envelope(app, queue, name, body={**text_limits, "task": name}, task=None, timelimit=None),
    ]


@pytest.mark.parametrize(
    ("queue", "process", "task"),
    [("tools.low", "worker", RUN_CALL_TASK), (APPROVALS_QUEUE, "approvals", DECIDE_TASK)],
)
def test_a_queue_message_no_api_process_could_send_is_dropped_without_stopping_its_worker(
    stack: Stack, queue: str, process: str, task: str
) -> None:
    dropped_before = stack.log(process).count(DROPPED)
    key = Namespace.of(stack.settings).prefix + queue
    with attacker_celery(stack) as app, redis_client(stack) as client:
        poison = _poison(app, queue, task)
        for payload in poison:
            client.lpush(key, payload)
        deadline = time.monotonic() + 60
        while stack.log(process).count(DROPPED) < dropped_before + len(poison):
            assert stack.processes[process].poll() is None, stack.log(process)[-3000:]
            assert time.monotonic() < deadline, stack.log(process)[-3000:]
            time.sleep(0.1)
        # Nothing was kept to be put back at the worker's next start.
        assert client.llen(key) == 0

    assert stack.processes[process].poll() is None
    print(f"{len(poison)} payloads pushed onto {queue}: dropped, {process} still serving")
    done = submit(stack, "echo", {"after": "poison"}, wait_s=30)
    assert (done["status"], done["value"]) == ("succeeded", {"after": "poison"}), done
    canary_approval(stack)


@pytest.mark.parametrize(
    ("queue", "process"), [("tools.low", "worker"), (APPROVALS_QUEUE, "approvals")]
)
def test_a_queue_key_of_another_type_is_deleted_without_stopping_its_worker(
    stack: Stack, queue: str, process: str
) -> None:
    # Redis answers a BRPOP over such a key with WRONGTYPE, on every poll of the worker.
    deleted = f"deleted the key {queue!r}: it was not a list"
    deleted_before = stack.log(process).count(deleted)
    key = Namespace.of(stack.settings).prefix + queue
    with redis_client(stack) as client:
        client.set(key, "planted")
        deadline = time.monotonic() + 60
        while stack.log(process).count(deleted) <= deleted_before:
            assert stack.processes[process].poll() is None, stack.log(process)[-3000:]
            assert time.monotonic() < deadline, stack.log(process)[-3000:]
            time.sleep(0.1)
        assert client.type(key) in (b"none", b"list")

    assert stack.processes[process].poll() is None
    done = submit(stack, "echo", {"after": "planted"}, wait_s=30)
    assert (done["status"], done["value"]) == ("succeeded", {"after": "planted"}), done
    canary_approval(stack)


@pytest.mark.parametrize(
    ("key", "kind"), [("tools.low", "list"), ("_kombu.binding.tools.low", "set")]
)
def test_a_key_planted_before_a_worker_starts_is_deleted_as_it_starts(
    redis_base: str, tmp_path: Path, request: pytest.FixtureRequest, key: str, kind: str
) -> None:
    # As a worker starts, Celery reads each queue's length and binds it to its exchange
    # (declaring it): a key of another type at either ended the start with WRONGTYPE.
    with own_stack(tmp_path, f"{redis_base}/{OWN_REDIS_DB}", request, keys=AGENT) as own:
        with redis_client(own) as client:
            client.hset(Namespace.of(own.settings).prefix + key, "planted", "1")
        own.start_api()
        own.start_worker(queues="tools.low")
        own.launcher.wait_for_log("worker", f"deleted the key {key!r}: it was not a {kind}")
        done = submit(own, "echo", {"after": "planted at start"}, wait_s=30)
        assert done["status"] == "succeeded", done


def test_a_deleted_binding_set_loses_no_decision(stack: Stack) -> None:
    # Had Celery routed by the queue's exchange, kombu would put every message sent with
    # its binding set gone into a dead-letter list nothing reads; it sends to the queue.
    canary_approval(stack)  # the API has declared the queue: it will not declare it again
    binding = Namespace.of(stack.settings).prefix + f"_kombu.binding.{APPROVALS_QUEUE}"
    with redis_client(stack) as client:
        members = client.smembers(binding)
        assert members, "the approval worker bound its queue"
        client.delete(binding)
        try:
            canary_approval(stack)
        finally:
            client.sadd(binding, *members)
