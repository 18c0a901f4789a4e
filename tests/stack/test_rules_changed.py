"""A rule added to the config while a call waits, for its approval or in the queue: neither
an approval nor an earlier acceptance outranks a ``deny_if`` that holds when the call
would run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.audit import audit_events
from ..support.calls import decide, result, submit, submit_pending
from ..support.stack import Stack, own_stack

REDIS_DB = 10
BEFORE = """
tools:
  - {name: wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [approver]}
  - {name: note, handler: "tests.fixture_tools:echo", risk: low}
"""
AFTER = """
tools:
  - name: wire
    handler: "tests.fixture_tools:echo"
    risk: high
    approvers: [approver]
    deny_if: "args.to == 'mallory'"
    deny_reason: "mallory's account is frozen"
  - name: note
    handler: "tests.fixture_tools:echo"
    risk: low
    deny_if: "args.to == 'mallory'"
"""


@pytest.fixture
def stack(redis_base: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stack]:
    keys = {"agent": ["agent"], "approver": ["approver"], "operator": ["operator"]}
    with own_stack(tmp_path, f"{redis_base}/{REDIS_DB}", request, keys=keys, tools=BEFORE) as stack:
        stack.start_api()
        stack.start_worker(concurrency=1)
        stack.start_worker(name="approvals", queues="approvals,maintenance", concurrency=1)
        yield stack


def test_an_approved_call_its_new_deny_if_refuses_does_not_run(stack: Stack) -> None:
    frozen = submit_pending(stack, "wire", args={"to": "mallory", "amount": 5})
    other = submit_pending(stack, "wire", args={"to": "bob", "amount": 5})
    # The operator adds the rule and restarts the tool worker; the requests still wait.
    stack.stop("worker")
    Path(stack.env["TOOLROUTER_CONFIG"]).write_text(AFTER, encoding="utf-8")
    stack.start_worker(concurrency=1)
    for call in (frozen, other):
        assert decide(stack, call["request_id"]).status_code == 200
    refused = result(stack, frozen["call_id"], wait_s=60)
    assert refused["status"] == "failed", refused
    assert refused["error_type"] == "Denied"
    assert refused["error"] == "denied by rule deny_if: mallory's account is frozen"
    assert "ok" not in [event for event, _ in audit_events(stack, frozen["call_id"])]
    # A call the new rule lets through runs on its approval.
    assert result(stack, other["call_id"], wait_s=60)["status"] == "succeeded"


def test_a_queued_call_its_new_deny_if_refuses_is_denied_not_told_as_gated(
    stack: Stack,
) -> None:
    stack.stop("worker")
    with stack.client() as http:
        queued = submit(http, "note", {"to": "mallory"})
    assert queued["status"] == "queued", queued
    Path(stack.env["TOOLROUTER_CONFIG"]).write_text(AFTER, encoding="utf-8")
    stack.start_worker(concurrency=1)
    refused = result(stack, queued["call_id"], wait_s=60)
    assert refused["status"] == "failed", refused
    assert refused["error_type"] == "Denied"
    assert refused["error"] == "denied by rule deny_if: args.to == 'mallory'"
