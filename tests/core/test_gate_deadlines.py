"""A decision is applied as of when it holds its request, and only within its deadline, and
an approval is bound to the edits it was made on (the approval worker, on a real database).

Found by an attacker: an approval the API had told failed (the gate waited past its
deadline for the audit chain's lock, after checking it) was applied after all; an approval
waiting for the request's lock past its expiry was recorded as made before it; and an
approval replayed after an edit and an edit back (the same hash) counted again.
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.answer import PAST_DEADLINE
from router.approval import requests as pending
from router.canonical import canonical_json, sha256_hex
from router.clock import FakeClock
from router.runtime import Runtime

from .test_gate import _deciders, audit_count, call_status, gate_for, submit_gated

__all__ = ["_deciders"]  # the test module's fixture: every decider's key


def test_a_decision_past_its_deadline_at_commit_is_rolled_back(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    call_id, request_id = submit_gated(runtime)
    gate = gate_for(runtime)
    append = gate.audit.append

    def waited_for_the_chain(conn: Any, entries: Any, *, at: int) -> list[int]:
        clock.advance(2_000)  # as long as the chain's lock took, past the deadline
        return append(conn, entries, at=at)

    monkeypatch.setattr(gate.audit, "append", waited_for_the_chain)
    before = audit_count(runtime)
    answer = gate.decide(request_id, "approver", "approve", deadline_ms=clock.now + 1_000)
    assert (answer.ok, answer.http_status, answer.error) == (False, 503, PAST_DEADLINE)
    assert call_status(runtime, call_id) == "pending"
    assert audit_count(runtime) == before
    with runtime.store.reading() as conn:
        assert pending.decisions(conn, request_id) == []


def test_an_approval_that_waited_past_the_expiry_is_refused(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    call_id, request_id = submit_gated(runtime)
    with runtime.store.reading() as conn:
        found = pending.get(conn, request_id)
    assert found is not None
    get = pending.get

    def waited_for_the_row(conn: Any, wanted: str, **options: Any) -> Any:
        clock.advance(found.expires_at - clock.now + 1)  # another decision held it till then
        return get(conn, wanted, **options)

    monkeypatch.setattr(pending, "get", waited_for_the_row)
    answer = gate_for(runtime).decide(request_id, "approver", "approve")
    assert (answer.http_status, answer.error) == (409, f"expired request: {request_id}")
    assert call_status(runtime, call_id) == "pending"


def test_an_approval_replayed_after_an_edit_and_one_back_is_refused(runtime: Runtime) -> None:
    call_id, request_id = submit_gated(runtime, tool="two_man")
    gate = gate_for(runtime)
    first = sha256_hex(canonical_json({"n": 1}))
    assert gate.decide(request_id, "approver", "approve", expected_edits=0).ok
    assert gate.decide(request_id, "approver2", "approve", args={"n": 2}).ok  # resets it
    back = gate.decide(request_id, "approver3", "approve", args={"n": 1})
    assert (back.ok, back.released, back.approvals) == (True, False, 1)
    # The first approval's message again, from Redis: the same hash, but not the same edits.
    replayed = gate.decide(
        request_id, "approver", "approve", expected_args_sha256=first, expected_edits=0
    )
    assert (replayed.ok, replayed.http_status) == (False, 409), replayed
    assert call_status(runtime, call_id) == "pending"
