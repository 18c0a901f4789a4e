"""A decision is bound to the arguments it was made on, wherever it is made: a decision
message replayed from Redis (SPEC §16: not trusted) after another approver edited the
arguments, or an inbox form posted from a page that showed the arguments before that edit,
must not count towards the edited arguments' approval. Nor does an approval whose key was
revoked since."""

from __future__ import annotations

import html
import json
import uuid
from typing import Any

import httpx

from router.canonical import args_digest
from router.constants import APPROVALS_QUEUE
from router.runtime import Runtime

from ..support.audit import audit_events
from ..support.inbox import csrf_of, sign_in_with
from ..support.redis_attacker import (
    attacker_celery,
    call_status,
    canary_approval,
    decide,
    pushes_seen,
    redis_client,
    request_detail,
    send_decision,
    submit,
)
from ..support.stack import Stack


def two_approver_call(stack: Stack) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A call that needs two approvers, its arguments, and what another approver will edit
    them to."""
    args = {"to": "alice", "amount": 10, "nonce": uuid.uuid4().hex}
    call = submit(stack, "two_man", args)
    assert call["status"] == "pending", call
    return call, args, {**args, "to": "mallory", "amount": 99999}


def reply_to_replay(stack: Stack, reply_to: str) -> dict[str, Any]:
    """The approval worker's answer to the replayed message, left on its reply list (the
    API read the answer to the original and waits for nothing more there)."""
    with redis_client(stack) as client:
        [raw] = client.lrange(reply_to, 0, -1)
    _, _, text = raw.decode().partition("|")
    return json.loads(text)


def test_a_decision_replayed_after_an_edit_does_not_count(stack: Stack) -> None:
    call, args, edited = two_approver_call(stack)
    request_id = call["request_id"]
    with pushes_seen(stack, APPROVALS_QUEUE) as pushed:
        first = decide(stack, request_id, "approver")
    assert first.status_code == 200 and first.json()["released"] is False, first.text
    [([message], _, _)] = pushed
    # The approver named no hash: the API bound the approval to the arguments it read.
    assert message["expected_args_sha256"] == args_digest(args)
    edit = decide(stack, request_id, "approver2", args=edited)
    assert edit.status_code == 200 and edit.json()["released"] is False, edit.text

    with attacker_celery(stack) as app:
        send_decision(app, message)
    canary_approval(stack)  # the approval worker takes one message at a time, in order
    answer = reply_to_replay(stack, message["reply_to"])
    if answer["http_status"] == 409:
        assert answer["error"].startswith("the arguments changed since you read them"), answer
    else:  # a loaded host took the message's deadline (the stack's decision timeout) first
        assert answer["error"].endswith("decision arrived after its deadline; not applied")

    request = request_detail(stack, request_id)
    assert request["status"] == "pending"
    assert [d["approver"] for d in request["decisions"]] == ["approver2"]
    assert call_status(stack, call["call_id"])["status"] == "pending"
    print(f"replayed {request_id}'s first approval after an edit: still pending")
    # A second approver who has read the edited arguments releases them.
    done = decide(stack, request_id, "approver3", wait_s=30)
    assert (done.json()["status"], done.json()["value"]) == ("succeeded", edited), done.text
    events = audit_events(stack, call["call_id"])
    assert [event for event, _ in events] == ["pending", "approved", "approved", "approved", "ok"]
    assert [actor for _, actor in events[1:4]] == ["approver", "approver2", "approver3"]


def test_an_inbox_decision_from_a_page_shown_before_an_edit_is_refused(stack: Stack) -> None:
    call, args, edited = two_approver_call(stack)
    request_id = call["request_id"]
    with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
        assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
        page = inbox.get("/ui/")
        edit = decide(stack, request_id, "approver2", args=edited)
        assert edit.status_code == 200 and edit.json()["released"] is False, edit.text
        # As the page's approve form sends it: the hash of the arguments it showed.
        form = {
            "decision": "approve",
            "request_id": request_id,
            "csrf": csrf_of(page),
            f"args_sha256.{request_id}": args_digest(args),
        }
        assert inbox.post("/ui/decide", data=form).status_code == 303
        flash = html.unescape(inbox.get("/ui/").text)
    assert "the arguments changed since you read them" in flash
    request = request_detail(stack, request_id)
    assert (request["status"], request["args"]) == ("pending", edited)
    assert [d["approver"] for d in request["decisions"]] == ["approver2"]
    done = decide(stack, request_id, "approver3", wait_s=30)
    assert done.json()["status"] == "succeeded", done.text


def test_the_inbox_does_not_count_an_approval_whose_key_was_revoked_since(stack: Stack) -> None:
    call, _, _ = two_approver_call(stack)
    request_id = call["request_id"]
    name = f"approver-{uuid.uuid4().hex[:8]}"
    runtime = Runtime(stack.settings)
    try:
        token = runtime.keys.create(name, ["approver"])
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=30) as http:
            first = http.post(f"/v1/approvals/{request_id}/approve", json={})
        assert first.status_code == 200 and first.json()["approvals"] == 1, first.text
        runtime.keys.revoke(name)
    finally:
        runtime.close()

    decisions = request_detail(stack, request_id)["decisions"]
    assert [(d["approver"], d.get("counts", True)) for d in decisions] == [(name, False)]
    with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
        assert sign_in_with(inbox, stack.keys["approver2"]).status_code == 303
        page = inbox.get("/ui/").text
    card = page[page.index(f'id="{request_id}"') :].split("</article>")[0]
    assert "<dt>approvals</dt><dd>0 of 2</dd>" in card, card
    done = decide(stack, request_id, "approver2")
    assert done.status_code == 200 and done.json()["released"] is False, done.text
    settled = decide(stack, request_id, "approver3")
    assert settled.json()["released"] is True, settled.text
