"""The approval worker's tasks: decisions (queue ``approvals``) and expiry (``maintenance``)."""

from __future__ import annotations

import json
from typing import Any

import redis

from router.constants import DECIDE_TASK, EXPIRE_TASK
from workers import process
from workers.app import app

from .gate import Gate

# The reply list outlives a late reader only briefly.
REPLY_TTL_S = 60


def gate() -> Gate:
    state = process.current()
    return Gate(state.runtime, state.notifier)


@app.task(name=DECIDE_TASK, ignore_result=True)
def decide(message: dict[str, Any]) -> str:
    """Apply one decision message and push the answer to its reply list."""
    the_gate = gate()
    answer = the_gate.decide(
        str(message["request_id"]),
        str(message["actor"]),
        frozenset(message.get("roles", [])),
        str(message["decision"]),
        message.get("reason"),
        int(message["deadline_ms"]),
    )
    client: redis.Redis = the_gate.notifier.client
    pipe = client.pipeline()
    pipe.rpush(message["reply_to"], json.dumps(answer.to_dict()))
    pipe.expire(message["reply_to"], REPLY_TTL_S)
    pipe.execute()
    return answer.status or answer.error or ""


@app.task(name=EXPIRE_TASK, ignore_result=True)
def expire_requests() -> int:
    return gate().expire_due()
