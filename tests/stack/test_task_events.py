"""What a real worker sends and writes per task: Flower sees every task, the task events
travel in batches, and the worker's log has no line per task.

Flower switches the workers' task events on while it runs. The workers publish them in
timed batches (``workers.task_events``): with one call at a time, Celery alone would publish
each event in a message of its own, a Redis round trip in the worker's consumer loop.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator

import httpx
import pytest
import redis

from router.cli import processes
from router.messaging.namespace import Namespace

from ..support.launcher import Launcher, free_port
from ..support.stack import Stack
from ..support.waiting import wait_for

CALLS = 20


class EventMessages:
    """Every task-event message published on the stack's Redis, counted as it arrives."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(f"{prefix}*celeryev*")
        self.messages: list[list[dict[str, object]]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stopping.is_set():
            message = self.pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            envelope = json.loads(message["data"])
            body = envelope["body"]
            if envelope["properties"].get("body_encoding") == "base64":
                body = base64.b64decode(body)
            body = json.loads(body)
            events = body if isinstance(body, list) else [body]
            with self.lock:
                self.messages.append([e for e in events if str(e["type"]).startswith("task-")])

    def task_events(self) -> list[dict[str, object]]:
        with self.lock:
            return [event for message in self.messages for event in message]

    def task_messages(self) -> int:
        with self.lock:
            return sum(1 for message in self.messages if message)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.pubsub.close()
        self.client.close()


@pytest.fixture
def flower(stack: Stack) -> Iterator[tuple[str, tuple[str, str]]]:
    port = free_port()
    settings = stack.settings.model_copy(update={"flower_port": port})
    env = {**stack.env, **processes.flower_env(settings), "TOOLROUTER_FLOWER_PORT": str(port)}
    launcher = Launcher(stack.state_dir, env)
    launcher.start("flower", processes.flower_argv(settings))
    url = f"http://127.0.0.1:{port}"
    auth = (settings.flower_user, processes.flower_password(settings))
    try:
        launcher.wait_for_http("flower", f"{url}/healthcheck", timeout=60)
        yield url, auth
    finally:
        launcher.stop_all()


def flower_args(web: httpx.Client, url: str, state: str | None = None) -> str:
    """The arguments (call ids) of the tasks Flower knows, in ``state`` if given."""
    tasks = web.get(f"{url}/api/tasks", params={"limit": 1000}).json()
    return " ".join(
        str(task.get("args")) for task in tasks.values() if state in (None, task.get("state"))
    )


def test_flower_shows_every_call_and_events_travel_in_batches(
    stack: Stack, flower: tuple[str, tuple[str, str]]
) -> None:
    url, auth = flower
    prefix = Namespace.of(stack.settings).prefix
    events = EventMessages(stack.settings.redis_url, prefix)
    try:
        with stack.client("agent") as http, httpx.Client(auth=auth, timeout=10) as web:
            # Flower turns events on when it starts: call until a call's task shows there.
            warm_up: list[str] = []

            def flower_sees_calls() -> bool:
                done = http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 20})
                assert done.json()["ok"], done.text
                warm_up.append(done.json()["call_id"])
                return any(call_id in flower_args(web, url) for call_id in warm_up)

            wait_for(flower_sees_calls, 60, "a call's task in Flower")
            sent = events.task_messages(), len(events.task_events())
            call_ids = []
            for i in range(CALLS):  # one at a time: Celery alone would send one event a message
                answer = http.post(
                    "/v1/calls", json={"tool": "echo", "args": {"i": i}, "wait_s": 20}
                )
                assert answer.json()["ok"], answer.text
                call_ids.append(answer.json()["call_id"])

            def every_task_succeeded_in_flower() -> bool:
                succeeded = flower_args(web, url, state="SUCCESS")
                return all(call_id in succeeded for call_id in call_ids)

            wait_for(every_task_succeeded_in_flower, 60, "every call's task SUCCESS in Flower")

            def every_event_published() -> bool:
                kinds = [e["type"] for e in events.task_events()[sent[1] :]]
                return all(
                    kinds.count(kind) >= CALLS
                    for kind in ("task-received", "task-started", "task-succeeded")
                )

            wait_for(every_event_published, 30, "three events per call")
        messages = events.task_messages() - sent[0]
        published = len(events.task_events()) - sent[1]
        # Three events a call; batched, they travel several to a message.
        assert published >= 3 * CALLS
        assert messages * 2 <= published, (messages, published)
    finally:
        events.close()


def test_a_worker_logging_at_info_writes_no_line_per_task(stack: Stack) -> None:
    """Celery's "received" and "succeeded in" lines are off (the audit log and Flower hold
    every task); the worker's own lines, such as its start, are still written."""
    with stack.client("agent") as http:
        for i in range(3):
            answer = http.post("/v1/calls", json={"tool": "echo", "args": {"i": i}, "wait_s": 20})
            assert answer.json()["ok"], answer.text
    log = stack.log("worker")
    assert "ready." in log
    # The main process writes "received" before the task reaches the pool, so before it ran.
    assert not re.search(r"^\S.*\] received$", log, re.MULTILINE), log[-2000:]
    assert "succeeded in" not in log, log[-2000:]
