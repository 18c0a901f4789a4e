"""Edit, then approve: an approver changes a gated call's arguments before approving it.

``edit_wire`` in ``tests/tools.yaml`` has an input schema and ``rule_wire``'s rules: over
1000 needs one approver, over 10000 two, and transfers to a blocked account are refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import httpx
import pytest

from router.canonical import args_digest
from router.messaging.decisions import DecisionMessage
from router.messaging.namespace import Namespace
from router.trust.keyring import Purpose

from ..support.audit import audit_rows
from ..support.calls import decide, result, submit, submit_pending
from ..support.stack import Stack
from .test_approvals_cli import cli, stack_cli_env
from .test_trust_messages import (
    attacker_celery,
    call_status,
    canary_approval,
    real_keyring,
    request_detail,
    running_flower,
    send_decision,
)

EDIT = "edit_wire"


def pending_wire(stack: Stack, amount: int, to: str = "bob") -> dict[str, Any]:
    return submit_pending(stack, EDIT, args={"amount": amount, "to": to})


def approved_rows(stack: Stack, call_id: str) -> list[dict[str, Any]]:
    return [row for row in audit_rows(stack, call_id=call_id) if row["event"] == "approved"]


def test_an_edited_approval_runs_the_edited_arguments_and_says_so(stack: Stack) -> None:
    original = {"amount": 5000, "to": "bob"}
    call = submit_pending(stack, EDIT, args=original)
    edited = {"amount": 4000, "to": "carol"}
    response = decide(stack, call["request_id"], args=edited, reason="fixed payee", wait_s=30)
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert outcome["status"] == "succeeded" and outcome["value"] == edited, outcome
    assert (outcome["edited"], outcome["args"], outcome["edited_by"]) == (
        True,
        edited,
        "approver",
    )
    # The requester reads the same: what ran is not what they sent.
    mine = result(stack, call["call_id"])
    assert (mine["value"], mine["edited"], mine["args"], mine["edited_by"]) == (
        edited,
        True,
        edited,
        "approver",
    )
    [row] = approved_rows(stack, call["call_id"])
    detail = row["detail"]
    assert row["actor"] == "approver" and detail["edited_by"] == "approver"
    assert detail["args_sha256"] == args_digest(edited)
    assert detail["original_args_sha256"] == args_digest(original)
    assert detail["released"] is True and detail["approvals_reset"] == []
    request = request_detail(stack, call["request_id"])
    assert request["args"] == edited and request["edited_by"] == "approver"
    assert request["args_sha256"] == args_digest(edited)
    assert request["original_args_sha256"] == args_digest(original)


def test_an_unedited_result_has_no_edit_fields(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    outcome = decide(stack, call["request_id"], wait_s=30).json()
    assert outcome["status"] == "succeeded"
    assert not {"edited", "args", "edited_by"} & set(outcome)


def test_an_edit_the_schema_refuses_is_422_and_changes_nothing(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    for bad in ({"amount": -5, "to": "bob"}, {"amount": 5000}, {"amount": 1, "to": "x", "y": 1}):
        response = decide(stack, call["request_id"], args=bad)
        assert response.status_code == 422, response.text
        assert "edited arguments refused: invalid arguments" in response.json()["error"]
    response = decide(stack, call["request_id"], args=["not", "an", "object"])
    assert response.status_code == 422, response.text
    request = request_detail(stack, call["request_id"])
    assert request["status"] == "pending" and request["decisions"] == []
    assert request["args"] == {"amount": 5000, "to": "bob"} and "edited_by" not in request
    assert approved_rows(stack, call["call_id"]) == []
    outcome = decide(stack, call["request_id"], wait_s=30).json()
    assert outcome["value"] == {"amount": 5000, "to": "bob"} and "edited" not in outcome


def test_an_edit_with_a_number_json_cannot_hold_is_422_and_nothing_is_sent(stack: Stack) -> None:
    """Python's parser reads ``1e400`` as infinity, which no JSON text holds: the edit is
    refused as a submission of it would be, before any decision goes out."""
    call = pending_wire(stack, 5000)
    logged_before = len(stack.log("api"))
    with stack.client("approver") as http:
        for text in ('{"amount": 1e400, "to": "bob"}', '{"amount": 1, "to": "bob", "x": -1e400}'):
            body = f'{{"args": {text}}}'
            response = http.post(f"/v1/approvals/{call['request_id']}/approve", content=body)
            assert response.status_code == 422, response.text
            assert response.json()["error"].startswith(
                "edited arguments refused: invalid arguments: arguments are not JSON"
            ), response.text
    request = request_detail(stack, call["request_id"])
    assert request["status"] == "pending" and request["decisions"] == []
    assert "Traceback" not in stack.log("api")[logged_before:]


def test_an_edit_that_deny_if_refuses_is_refused(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    response = decide(stack, call["request_id"], args={"amount": 5000, "to": "blocked-account"})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == (
        "edited arguments refused: denied by rule deny_if: "
        "transfers to blocked accounts are refused"
    )
    assert call_status(stack, call["call_id"])["status"] == "pending"
    assert request_detail(stack, call["request_id"])["decisions"] == []


def test_an_edit_the_rules_cannot_read_needs_the_most_approvers(stack: Stack) -> None:
    # An integer beyond CEL's signed 64 bits fails the rules closed in the approval worker
    # too: the approver is answered at once, never left waiting for a time-out.
    call = pending_wire(stack, 5000)
    edited = {"amount": 2**63, "to": "bob"}
    first = decide(stack, call["request_id"], args=edited)
    assert first.status_code == 200, first.text
    answer = first.json()
    assert (answer["approvals"], answer["approvals_required"], answer["released"]) == (1, 2, False)
    assert call_status(stack, call["call_id"])["args"] == edited


def test_an_edit_as_large_as_a_call_may_send_is_approved(stack: Stack) -> None:
    # The API's body limit for decisions leaves room for arguments as large as a call's,
    # as the decision route itself does.
    call = pending_wire(stack, 5000)
    edited = {"amount": 4000, "to": "x" * 100_000}
    response = decide(stack, call["request_id"], args=edited, wait_s=30)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["value"] == edited


def test_an_edit_past_the_threshold_needs_a_second_approver(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    edited = {"amount": 50000, "to": "bob"}
    first = decide(stack, call["request_id"], args=edited).json()
    assert (first["approvals"], first["approvals_required"], first["released"]) == (1, 2, False)
    assert first["edited"] is True and first["args_sha256"] == args_digest(edited)
    assert decide(stack, call["request_id"]).status_code == 409  # the editor again
    status = call_status(stack, call["call_id"])
    assert status["status"] == "pending" and status["args"] == edited
    second = decide(stack, call["request_id"], key="approver2", wait_s=30).json()
    assert second["status"] == "succeeded" and second["value"] == edited, second


def test_an_edit_forgets_the_approvals_given_before_it(stack: Stack) -> None:
    call = pending_wire(stack, 20000)
    assert decide(stack, call["request_id"]).json()["approvals"] == 1
    edited = {"amount": 30000, "to": "bob"}
    answer = decide(stack, call["request_id"], key="approver2", args=edited).json()
    assert (answer["approvals"], answer["released"]) == (1, False), answer
    detail = approved_rows(stack, call["call_id"])[-1]["detail"]
    assert detail["approvals_reset"] == ["approver"] and detail["edited_by"] == "approver2"
    # The first approver approved other arguments; they may approve these ones now.
    again = decide(stack, call["request_id"], wait_s=30).json()
    assert again["status"] == "succeeded" and again["value"] == edited, again


def test_an_edit_the_rules_would_not_gate_stays_gated(stack: Stack) -> None:
    call = pending_wire(stack, 20000)
    edited = {"amount": 10, "to": "bob"}
    answer = decide(stack, call["request_id"], args=edited).json()
    # The count never drops: the request still needs its two approvers.
    assert (answer["approvals"], answer["approvals_required"], answer["released"]) == (1, 2, False)
    request = request_detail(stack, call["request_id"])
    assert "kept gated" in request["rule"]
    outcome = decide(stack, call["request_id"], key="approver2", wait_s=30).json()
    assert outcome["value"] == edited


def test_an_edit_that_changes_nothing_is_a_plain_approval(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    outcome = decide(stack, call["request_id"], args={"to": "bob", "amount": 5000}, wait_s=30)
    assert outcome.status_code == 200, outcome.text
    assert "edited" not in outcome.json()


def test_forged_edits_change_nothing(stack: Stack) -> None:
    namespace = Namespace.of(stack.settings)
    call = pending_wire(stack, 5000)
    target = call["request_id"]
    genuine = real_keyring(stack)
    wanted = {"amount": 4000, "to": "carol"}
    forged = {"amount": 9000, "to": "mallory"}

    def tagged(args: Any) -> dict[str, Any]:
        draft = DecisionMessage(
            request_id=target,
            actor="approver",
            decision="approve",
            reason="forged",
            deadline_ms=int(time.time() * 1000) + 120_000,
            reply_to=namespace.key("decision-reply", "x" * 32),
            args=args,
            args_sha256=None if args is None else args_digest(args),
        )
        return {**asdict(draft), "mac": genuine.sign(Purpose.DECISION, draft.signed_text())}

    plain = tagged(None)
    edit = tagged(wanted)
    forgeries = [
        {**plain, "args": forged},  # a real plain approval, arguments added
        {**plain, "args": forged, "args_sha256": args_digest(forged)},
        {**edit, "args": forged},  # a real edit, its arguments swapped
        {**edit, "args": forged, "args_sha256": args_digest(forged)},
    ]
    with attacker_celery(stack) as app:
        for body in forgeries:
            send_decision(app, body)
    canary_approval(stack)
    status = call_status(stack, call["call_id"])
    assert status["status"] == "pending" and "edited" not in status
    request = request_detail(stack, target)
    assert request["decisions"] == [] and request["args"] == {"amount": 5000, "to": "bob"}
    assert approved_rows(stack, call["call_id"]) == []
    outcome = decide(stack, target, wait_s=30).json()
    assert outcome["value"] == {"amount": 5000, "to": "bob"}


def test_an_approver_edits_from_the_command_line(stack: Stack) -> None:
    call = pending_wire(stack, 5000)
    env = stack_cli_env(stack, "approver")
    edited = {"amount": 4500, "to": "carol"}
    approved = cli(
        env,
        "approvals",
        "approve",
        call["request_id"],
        "--args",
        json.dumps(edited),
        "--wait",
        "20",
    )
    assert approved.returncode == 0, approved.stdout + approved.stderr
    outcome = json.loads(approved.stdout)
    assert (outcome["value"], outcome["edited"], outcome["edited_by"]) == (edited, True, "approver")
    refused = cli(env, "approvals", "approve", call["request_id"], "--args", "[1]")
    assert refused.returncode != 0 and "must be a JSON object" in refused.stderr


def test_an_approval_of_arguments_read_before_an_edit_is_refused(stack: Stack) -> None:
    """Approver 2 read 20000; approver 1 edited it to 30000 meanwhile. Approver 2's approval
    names the hash it read, so it is refused rather than counted for arguments unseen."""
    call = pending_wire(stack, 20000)
    read = request_detail(stack, call["request_id"])["args_sha256"]
    assert read == args_digest({"amount": 20000, "to": "bob"})
    edited = {"amount": 30000, "to": "bob"}
    assert decide(stack, call["request_id"], args=edited).json()["approvals"] == 1
    stale = decide(stack, call["request_id"], key="approver2", expected_args_sha256=read)
    assert stale.status_code == 409, stale.text
    now = args_digest(edited)
    assert stale.json()["error"] == (
        f"the arguments changed since you read them (args_sha256 is now {now}); nothing was decided"
    )
    decided = request_detail(stack, call["request_id"])["decisions"]
    assert [d["approver"] for d in decided] == ["approver"], decided
    malformed = decide(stack, call["request_id"], key="approver2", expected_args_sha256="x")
    assert malformed.status_code == 422
    # From the command line, with the hash `approvals list` shows.
    env = stack_cli_env(stack, "approver2")
    listed = cli(env, "approvals", "list")
    assert f"args_sha256: {now}" in listed.stdout
    approved = cli(
        env, "approvals", "approve", call["request_id"], "--expect-sha256", now, "--wait", "20"
    )
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert json.loads(approved.stdout)["value"] == edited


def flower_tasks(http: httpx.Client, auth: tuple[str, str], name: str) -> list[dict[str, Any]]:
    tasks = http.get("/api/tasks", params={"taskname": name}, auth=auth).json()
    return list(tasks.values())


@pytest.mark.timeout(300)
def test_flower_shows_a_decision_without_its_edited_arguments_or_reason(stack: Stack) -> None:
    secret_payee, secret_reason = "payee-only-approvers-read", "reason-only-approvers-read"
    with running_flower(stack) as (base, auth), httpx.Client(base_url=base, timeout=30) as http:
        # Flower switches task events on when it starts: shown once a call of ours is.
        deadline = time.monotonic() + 60
        while not flower_tasks(http, auth, "toolrouter.run_call"):
            assert time.monotonic() < deadline, "Flower shows no task"
            with stack.client() as api:
                submit(api, "echo", {"n": 1}, wait_s=10)
            time.sleep(1)
        call = pending_wire(stack, 5000)
        edited = {"amount": 4000, "to": secret_payee}
        response = decide(stack, call["request_id"], args=edited, reason=secret_reason, wait_s=30)
        assert response.status_code == 200, response.text
        shown: list[dict[str, Any]] = []
        while not shown and time.monotonic() < deadline + 30:
            decisions = flower_tasks(http, auth, "toolrouter.decide")
            shown = [task for task in decisions if call["request_id"] in str(task.get("args"))]
            time.sleep(0.5)
        page = http.get("/tasks/datatable", params={"length": 100}, auth=auth).text
    assert len(shown) == 1, shown
    text = json.dumps(shown) + page
    assert secret_payee not in text and secret_reason not in text, shown
    assert "approve" in str(shown[0]["args"])
    print(f"Flower shows the decision as {shown[0]['args']} {shown[0]['kwargs']}")
