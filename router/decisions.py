"""Sending an approver's decision to the approval worker and waiting for its answer.

The decision travels as a Celery message on the ``approvals`` queue; the answer comes
back on a Redis list named for this one decision. The message expires when the API
stops waiting, and carries a deadline the worker checks inside its transaction, so a
decision the approver was told had failed (503) is never applied later.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from typing import Any

import redis
from celery import Celery

from .clock import Clock
from .constants import APPROVALS_QUEUE, DECIDE_TASK, DECISION_REPLY_PREFIX
from .errors import Unavailable

# The API waits this much longer than the deadline, so an answer committed just before
# the deadline is still heard.
REPLY_MARGIN_S = 2.0


@dataclass(frozen=True, slots=True)
class DecisionMessage:
    """Everything the approval worker needs; the request id names the call, nothing else."""

    request_id: str
    actor: str
    roles: list[str]
    decision: str
    reason: str | None
    deadline_ms: int
    reply_to: str


class DecisionClient:
    def __init__(self, app: Celery, redis_url: str, *, clock: Clock, timeout_s: float) -> None:
        self.app, self.clock, self.timeout_s = app, clock, timeout_s
        self.redis = redis.Redis.from_url(
            redis_url, socket_connect_timeout=2, socket_timeout=timeout_s + REPLY_MARGIN_S + 5
        )

    def send(
        self, request_id: str, actor: str, roles: frozenset[str], decision: str, reason: str | None
    ) -> dict[str, Any]:
        """Publish the decision and return the worker's answer; ``Unavailable`` if none came."""
        reply_to = DECISION_REPLY_PREFIX + secrets.token_hex(16)
        message = DecisionMessage(
            request_id=request_id,
            actor=actor,
            roles=sorted(roles),
            decision=decision,
            reason=reason,
            deadline_ms=self.clock() + int(self.timeout_s * 1000),
            reply_to=reply_to,
        )
        try:
            self.app.send_task(
                DECIDE_TASK,
                args=[asdict(message)],
                queue=APPROVALS_QUEUE,
                routing_key=APPROVALS_QUEUE,
                expires=self.timeout_s,
            )
            answer = self.redis.blpop([reply_to], timeout=self.timeout_s + REPLY_MARGIN_S)
        except Exception as exc:  # kombu and redis-py raise many types for "Redis is down"
            raise Unavailable(f"broker: {exc}") from None
        if answer is None:
            raise Unavailable(
                f"approval worker did not answer within {self.timeout_s:g} s; "
                "the decision was not applied"
            )
        return dict(json.loads(answer[1]))
