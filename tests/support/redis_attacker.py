"""What someone holding Redis can send (a Celery app under the stack's namespace, decision
messages), and the real requests and decisions that show whether it changed anything."""

from __future__ import annotations

import base64
import codecs
import json
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import httpx
import redis
from celery import Celery

from router.constants import APPROVALS_QUEUE, DECIDE_TASK, DECISION_REPLY
from router.messaging.celery_app import make_celery
from router.messaging.decisions import DecisionMessage
from router.messaging.namespace import Namespace
from router.trust.keyring import KeyRing, Purpose

from .audit import audit_events
from .stack import Stack

# A quoted word of a MONITOR line, its quotes and backslashes escaped.
QUOTED = re.compile(rb'"((?:[^"\\]|\\.)*)"')
DEADLINE_S = 60


@contextmanager
def redis_client(stack: Stack) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(stack.settings.redis_url or "")
    try:
        yield client
    finally:
        client.close()


@contextmanager
def attacker_celery(stack: Stack) -> Iterator[Celery]:
    """A Celery app on the stack's Redis, under the stack's namespace: anyone with Redis
    can build it, since the namespace is not a secret."""
    app = make_celery(stack.settings.redis_url or "", Namespace.of(stack.settings))
    try:
        yield app
    finally:
        app.close()


def send_decision(app: Celery, body: dict[str, Any]) -> None:
    app.send_task(DECIDE_TASK, args=[body], queue=APPROVALS_QUEUE, routing_key=APPROVALS_QUEUE)


def decision_body(
    namespace: Namespace,
    request_id: str,
    actor: str,
    *,
    decision: str = "approve",
    reply_to: str | None = None,
    keyring: KeyRing | None = None,
) -> dict[str, Any]:
    """A decision message; tagged with ``keyring`` when one is given, else with no tag."""
    draft = DecisionMessage(
        request_id=request_id,
        actor=actor,
        decision=decision,
        reason="forged",
        deadline_ms=int(time.time() * 1000) + 120_000,
        reply_to=reply_to or namespace.key(DECISION_REPLY, secrets.token_hex(16)),
    )
    body = asdict(draft)
    if keyring is None:
        body.pop("mac")
    else:
        body["mac"] = keyring.sign(Purpose.DECISION, draft.signed_text())
    return body


def submit(
    stack: Stack, tool: str, args: dict[str, Any], key: str = "agent", wait_s: float = 0
) -> dict[str, Any]:
    payload: dict[str, Any] = {"tool": tool, "args": args}
    if wait_s:
        payload["wait_s"] = wait_s
    with stack.client(key) as http:
        response = http.post("/v1/calls", json=payload)
    assert response.status_code == 200, response.text
    return response.json()


def submit_gated(stack: Stack, tool: str = "high_echo") -> tuple[dict[str, Any], dict[str, Any]]:
    args = {"to": "mallory", "nonce": uuid.uuid4().hex}
    call = submit(stack, tool, args)
    assert call["status"] == "pending", call
    return call, args


def decide(stack: Stack, request_id: str, key: str = "approver", **body: Any) -> httpx.Response:
    with stack.client(key) as http:
        return http.post(f"/v1/approvals/{request_id}/approve", json=body)


def call_status(stack: Stack, call_id: str) -> dict[str, Any]:
    with stack.client("agent") as http:
        return http.get(f"/v1/calls/{call_id}").json()


def request_detail(stack: Stack, request_id: str) -> dict[str, Any]:
    with stack.client("operator") as http:
        return http.get(f"/v1/approvals/{request_id}").json()["request"]


def released_by_a_real_approval(stack: Stack, call: dict[str, Any], args: dict[str, Any]) -> None:
    """The request is still open to a real approver, and the call then runs for real."""
    response = decide(stack, call["request_id"], wait_s=30)
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert (outcome.get("status"), outcome.get("value")) == ("succeeded", args), outcome
    events = audit_events(stack, call["call_id"])
    assert [e for e, _ in events] == ["pending", "approved", "ok"], events
    assert events[1][1] == "approver"


def canary_approval(stack: Stack) -> None:
    """A real decision through the approval worker's queue, behind whatever was sent before."""
    canary, _ = submit_gated(stack)
    response = decide(stack, canary["request_id"])
    assert response.status_code == 200, response.text
    assert response.json()["released"] is True


def untrusted(stack: Stack, kind: str) -> float:
    """``toolrouter_untrusted_messages_total{kind=...}`` as the API's /metrics shows it."""
    body = httpx.get(f"{stack.base_url}/metrics", timeout=30).text
    pattern = re.compile(
        r'^toolrouter_untrusted_messages_total\{kind="' + re.escape(kind) + r'"\} (\S+)$', re.M
    )
    found = pattern.search(body)
    return float(found.group(1)) if found else 0.0


@contextmanager
def pushes_seen(stack: Stack, queue: str) -> Iterator[list[dict[str, Any]]]:
    """The task messages pushed onto ``queue`` while inside, as someone reading Redis's
    ``MONITOR`` sees them (kombu's envelope, body decoded): filled in on leaving."""
    key = (Namespace.of(stack.settings).prefix + queue).encode()
    client = redis.Redis.from_url(stack.settings.redis_url or "", socket_timeout=DEADLINE_S)
    seen: list[dict[str, Any]] = []
    with client.monitor() as monitor:
        yield seen
        # A marker after everything of the block: the monitor has shown all of it once seen.
        marker = secrets.token_hex(8).encode()
        client.get(marker)
        while True:
            line = monitor.connection.read_response()
            assert isinstance(line, bytes)
            words = [codecs.escape_decode(word)[0] for word in QUOTED.findall(line)]
            if words[:2] == [b"GET", marker]:
                break
            if len(words) == 3 and words[0].upper() == b"LPUSH" and words[1] == key:
                envelope = json.loads(words[2])
                seen.append(json.loads(base64.b64decode(envelope["body"])))
    client.close()
