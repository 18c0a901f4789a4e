"""An approver is never told that a decision failed which the approval worker applied
(SPEC §5), even when its answer is lost in Redis, which is not trusted (SPEC §16): past
the deadline the API asks the database. Here no approval worker runs; the gate applies
the decision in-process, as the worker would, and its answer never reaches Redis."""

from __future__ import annotations

import pytest

from approvals.gate import Gate
from router.approval.model import Decision
from router.errors import Unavailable
from router.messaging.decisions import DecisionClient
from router.runtime import Runtime

from .test_gate import submit_gated


def client(runtime: Runtime, *, asks_the_database: bool = True) -> DecisionClient:
    return DecisionClient(
        runtime.celery,
        runtime.redis_url,
        runtime.namespace,
        runtime.keyring,
        clock=runtime.clock,
        timeout_s=0.5,
        applied=runtime.approvals_view.applied if asks_the_database else None,
    )


@pytest.fixture(autouse=True)
def _deciders(runtime: Runtime) -> None:
    runtime.keys.create("approver", ["approver"])
    runtime.keys.create("approver2", ["approver"])
    runtime.keys.create("agent", ["agent"])


def test_an_applied_approval_whose_answer_was_lost_is_told_as_applied(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime)
    assert Gate(runtime, runtime.notifier()).decide(request_id, "approver", Decision.APPROVE).ok
    answer = client(runtime).send(request_id, "approver", Decision.APPROVE, None)
    assert answer["status"] == "approved" and answer["released"] is True
    assert (answer["approvals"], answer["approvals_required"]) == (1, 1)
    # Without asking the database, the same lost answer is told as a failure.
    with pytest.raises(Unavailable, match="the decision was not applied"):
        client(runtime, asks_the_database=False).send(
            request_id, "approver", Decision.APPROVE, None
        )


def test_a_denial_and_a_cancel_whose_answers_were_lost_are_told_as_applied(
    runtime: Runtime,
) -> None:
    gate = Gate(runtime, runtime.notifier())
    _, denied = submit_gated(runtime)
    assert gate.decide(denied, "approver", Decision.DENY).ok
    assert client(runtime).send(denied, "approver", Decision.DENY, None)["status"] == "denied"
    _, cancelled = submit_gated(runtime)
    assert gate.decide(cancelled, "agent", Decision.CANCEL).ok
    # As the word arrives from a message, not the enum.
    answer = client(runtime).send(cancelled, "agent", "cancel", None)
    assert answer["status"] == "cancelled"


def test_a_decision_nobody_applied_is_still_told_as_not_applied(runtime: Runtime) -> None:
    _, request_id = submit_gated(runtime)
    # Another approver's decision is not this one's.
    assert Gate(runtime, runtime.notifier()).decide(request_id, "approver2", Decision.DENY).ok
    with pytest.raises(Unavailable, match="the decision was not applied"):
        client(runtime).send(request_id, "approver", Decision.DENY, None)
    _, untouched = submit_gated(runtime)
    with pytest.raises(Unavailable, match="the decision was not applied"):
        client(runtime).send(untouched, "approver", Decision.APPROVE, None)
