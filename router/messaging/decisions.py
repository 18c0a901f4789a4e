"""Sending an approver's decision to the approval worker and waiting for its answer.

The decision travels as a Celery message on the ``approvals`` queue; the answer comes
back on a Redis list named for this one decision. The message expires when the API
stops waiting, and carries a deadline the worker checks inside its transaction, so a
decision the approver was told had failed (503) is never applied later.

Redis is not trusted: the message names the deciding key and nothing it may do (the
approval worker reads the key's roles from the database), and it carries a tag made with
the deployment's decision key, which Redis never sees. A message without a valid tag
changes nothing; so does an answer without one.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis
from celery import Celery

from .. import metrics
from ..canonical import canonical_json, sha256_hex
from ..clock import Clock
from ..constants import APPROVALS_QUEUE, DECIDE_TASK, DECISION_REPLY
from ..errors import Unavailable
from ..metrics import Untrusted
from ..trust.keyring import KeyRing, Purpose
from .namespace import Namespace
from .redis_clients import redis_client

log = logging.getLogger(__name__)

# The API waits this much longer than the deadline, so an answer committed just before
# the deadline is still heard.
REPLY_MARGIN_S = 2.0
# After losing Redis while waiting for an answer, before listening again.
RELISTEN_S = 0.1
# How the database says a decision ended, if the approval worker applied it: (request id,
# actor, decision, when it was sent) to the answer the worker would have sent, or None.
Applied = Callable[[str, str, str, int], dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class DecisionMessage:
    """Everything the approval worker needs; the request id names the call, nothing else."""

    request_id: str
    actor: str
    decision: str
    reason: str | None
    deadline_ms: int
    reply_to: str
    # An approval's edited arguments; the tag covers their hash, checked on arrival.
    args: Any = None
    args_sha256: str | None = None
    # The hash of the arguments the approver read: refused if they have changed since.
    expected_args_sha256: str | None = None
    # How many times they had been edited: an edit and one back give the same hash.
    expected_edits: int | None = None
    mac: str = ""

    def signed_text(self) -> str:
        fields = asdict(self)
        fields.pop("mac")
        fields.pop("args")
        for optional in ("args_sha256", "expected_args_sha256", "expected_edits"):
            if fields[optional] is None:
                # Absent, not null: a decision without it is tagged as it always was.
                fields.pop(optional)
        return canonical_json(fields)

    @classmethod
    def parse(cls, body: Any) -> DecisionMessage | None:
        """The message in a task's argument; None when it is not one."""
        try:
            message = cls(
                request_id=str(body["request_id"]),
                actor=str(body["actor"]),
                decision=str(body["decision"]),
                reason=None if body.get("reason") is None else str(body["reason"]),
                deadline_ms=int(body["deadline_ms"]),
                reply_to=str(body["reply_to"]),
                args=body.get("args"),
                args_sha256=None if body.get("args_sha256") is None else str(body["args_sha256"]),
                expected_args_sha256=(
                    None
                    if body.get("expected_args_sha256") is None
                    else str(body["expected_args_sha256"])
                ),
                expected_edits=(
                    None if body.get("expected_edits") is None else int(body["expected_edits"])
                ),
                mac=str(body["mac"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return message

    def verifies(self, keyring: KeyRing, namespace: Namespace) -> bool:
        """Made by an API process of this deployment, answering to one of its reply lists,
        with exactly the edited arguments it tagged (if any)."""
        return (
            self.reply_to.startswith(namespace.key(DECISION_REPLY, ""))
            and keyring.verify(Purpose.DECISION, self.signed_text(), self.mac)
            and self._args_match()
        )

    def _args_match(self) -> bool:
        if self.args_sha256 is None:
            return self.args is None
        try:
            return sha256_hex(canonical_json(self.args)) == self.args_sha256
        except (TypeError, ValueError, RecursionError):
            return False


def sealed_reply(keyring: KeyRing, reply_to: str, answer: dict[str, Any]) -> str:
    """The approval worker's answer as pushed to ``reply_to``: ``tag|json``."""
    text = json.dumps(answer, sort_keys=True)
    return f"{keyring.sign(Purpose.DECISION, reply_to + '|' + text)}|{text}"


def open_reply(keyring: KeyRing, reply_to: str, raw: bytes) -> dict[str, Any] | None:
    """The answer in ``raw`` if the approval worker made it; None otherwise."""
    tag, _, text = raw.decode("utf-8", "replace").partition("|")
    if not keyring.verify(Purpose.DECISION, reply_to + "|" + text, tag):
        return None
    try:
        answer = json.loads(text)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


class DecisionClient:
    def __init__(
        self,
        app: Celery,
        redis_url: str,
        namespace: Namespace,
        keyring: KeyRing,
        *,
        clock: Clock,
        timeout_s: float,
        applied: Applied | None = None,
    ) -> None:
        self.app, self.clock, self.timeout_s = app, clock, timeout_s
        self.namespace, self.keyring = namespace, keyring
        self.applied = applied
        self.redis = redis_client(
            redis_url, socket_connect_timeout=2, socket_timeout=timeout_s + REPLY_MARGIN_S + 5
        )

    def send(
        self,
        request_id: str,
        actor: str,
        decision: str,
        reason: str | None,
        args: dict[str, Any] | None = None,
        expected_args_sha256: str | None = None,
        expected_edits: int | None = None,
    ) -> dict[str, Any]:
        """Publish the decision (an approval may carry edited ``args``, and the hash and the
        edit count of the arguments it was made on) and return the worker's answer;
        ``Unavailable`` if none came."""
        reply_to = self.namespace.key(DECISION_REPLY, secrets.token_hex(16))
        sent_at = self.clock()
        draft = DecisionMessage(
            request_id=request_id,
            actor=actor,
            decision=decision,
            reason=reason,
            deadline_ms=sent_at + int(self.timeout_s * 1000),
            reply_to=reply_to,
            args=args,
            args_sha256=None if args is None else sha256_hex(canonical_json(args)),
            expected_args_sha256=expected_args_sha256,
            expected_edits=expected_edits,
        )
        message = DecisionMessage(
            **{**asdict(draft), "mac": self.keyring.sign(Purpose.DECISION, draft.signed_text())}
        )
        deadline = time.monotonic() + self.timeout_s + REPLY_MARGIN_S
        try:
            self.app.send_task(
                DECIDE_TASK,
                args=[asdict(message)],
                # What Flower shows of it: edited arguments and reasons stay out of its pages.
                argsrepr=repr([{"request_id": request_id, "decision": str(decision)}]),
                kwargsrepr="{}",
                queue=APPROVALS_QUEUE,
                routing_key=APPROVALS_QUEUE,
                expires=self.timeout_s,
            )
        except Exception as exc:  # kombu and redis-py raise many types for "Redis is down"
            raise Unavailable(f"broker: {exc}") from None
        warned = False
        while (left := deadline - time.monotonic()) > 0:
            try:
                popped = self.redis.blpop([reply_to], timeout=max(left, 0.01))
            except redis.RedisError as exc:
                # Sent: the worker may still apply it until its deadline, so this is no
                # failure to tell the approver. Listen again, on a new connection: the
                # answer waits in its list. (Said once a decision: Redis may stay away.)
                if not warned:
                    log.warning("lost Redis while waiting for decision %s: %s", request_id, exc)
                    warned = True
                time.sleep(min(RELISTEN_S, max(deadline - time.monotonic(), 0.0)))
                continue
            if popped is None:
                break
            raw = popped[1]
            answer = open_reply(
                self.keyring, reply_to, raw if isinstance(raw, bytes) else raw.encode()
            )
            if answer is not None:
                return answer
            metrics.untrusted(Untrusted.DECISION_REPLY)
        # Past the deadline the worker applies it no more; but its answer may have been
        # lost in Redis (deleted, a connection dropped), so the database says.
        answer = self._applied_after_all(request_id, actor, decision, sent_at)
        if answer is not None:
            return answer
        raise Unavailable(
            f"approval worker did not answer within {self.timeout_s:g} s; "
            "the decision was not applied"
        )

    def _applied_after_all(
        self, request_id: str, actor: str, decision: str, sent_at: int
    ) -> dict[str, Any] | None:
        if self.applied is None:
            return None
        try:
            return self.applied(request_id, actor, decision, sent_at)
        except Exception:  # the database is down too: nothing more can be told
            log.warning("could not read whether decision %s was applied", request_id)
            return None
