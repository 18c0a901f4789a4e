"""The approval worker's tasks: decisions (queue ``approvals``) and housekeeping
(``maintenance``): expiry and the audit chain's signed head."""

from __future__ import annotations

import logging
from typing import Any

from router import metrics
from router.audit import head as audit_head
from router.constants import DECIDE_TASK, EXPIRE_TASK, SIGN_AUDIT_HEAD_TASK
from router.messaging.decisions import DecisionMessage, sealed_reply
from router.metrics import Untrusted
from workers import process
from workers.app import app

from .gate import Gate

log = logging.getLogger(__name__)

# The reply list outlives a late reader only briefly.
REPLY_TTL_S = 60


def gate() -> Gate:
    state = process.current()
    return Gate(state.runtime, state.notifier)


@app.task(name=DECIDE_TASK, ignore_result=True)
def decide(body: Any) -> str:
    """Apply one decision message made by an API process, and push the sealed answer to its
    reply list. Any other message changes nothing and gets no answer."""
    the_gate = gate()
    runtime = the_gate.runtime
    message = DecisionMessage.parse(body)
    if message is None or not message.verifies(runtime.keyring, runtime.namespace):
        metrics.untrusted(Untrusted.DECISION)
        log.warning("ignored a decision message that no API process made")
        return "untrusted"
    answer = the_gate.decide(
        message.request_id,
        message.actor,
        message.decision,
        message.reason,
        message.deadline_ms,
        args=message.args,
        expected_args_sha256=message.expected_args_sha256,
        expected_edits=message.expected_edits,
    )
    client = the_gate.notifier.client
    pipe = client.pipeline()
    pipe.rpush(message.reply_to, sealed_reply(runtime.keyring, message.reply_to, answer.to_dict()))
    pipe.expire(message.reply_to, REPLY_TTL_S)
    pipe.execute()
    return answer.status or answer.error or ""


@app.task(name=EXPIRE_TASK, ignore_result=True)
def expire_requests() -> int:
    return gate().expire_due()


@app.task(name=SIGN_AUDIT_HEAD_TASK, ignore_result=True)
def sign_audit_head() -> int:
    """Export the audit chain's signed head beside the key (``router.audit.head``)."""
    runtime = process.current().runtime
    head = audit_head.export(
        runtime.store,
        runtime.keyring,
        runtime.namespace.name,
        audit_head.head_file(runtime.settings, runtime.namespace.name),
        runtime.clock,
        keyed_from_seq=runtime.deployment.keyed_from_seq,
    )
    return head.seq
