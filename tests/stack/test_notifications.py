"""Notifications to approvers, end to end: a real API, tool worker and approval worker (which
serves the ``notifications`` queue), receivers on loopback (a signed webhook, a Slack-style
webhook, receivers that fail) and a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import update

from router.constants import (
    DELIVER_TASK,
    ESCALATE_TASK,
    EXPIRE_TASK,
    MAINTENANCE_QUEUE,
    NOTIFICATIONS_QUEUE,
    RESEND_TASK,
)
from router.db.schema import notification_deliveries
from router.messaging.celery_app import make_celery
from router.notify import deliveries as delivery_rows
from router.notify.model import NotifyEvent
from router.runtime import Runtime

from ..support import services
from ..support.launcher import free_port
from ..support.receivers import (
    FlakyScript,
    HeldScript,
    Mailbox,
    accept,
    refuse,
    request_id_of,
)
from ..support.scripted_http import ScriptedServer, Seen
from ..support.slack_blocks import links, parsed, shown
from ..support.stack import Stack, stack_env
from ..support.waiting import wait_for

HOOK_SECRET = "whsec-0123456789abcdef-notify"
SLACK_TOKEN = "XXSLACKSECRETTOKENXX"
SMTP_PASSWORD = "smtp-pass-7f3a9c"
PUBLIC_URL = "https://inbox.example.test"
# Its own Redis db: the session's stacks flush theirs.
REDIS_DB = 10

CONFIG = """
notifications:
  channels:
    hook: {type: webhook, url: "${HOOK_URL}", secret: "${HOOK_SECRET}"}
    chat: {type: slack, url: "${SLACK_URL}"}
    mail:
      type: email
      host: 127.0.0.1
      port: ${SMTP_PORT}
      from_addr: toolrouter@example.test
      to: [approvers@example.test]
      username: toolrouter
      password: "${SMTP_PASSWORD}"
    flaky-hook: {type: webhook, url: "${FLAKY_URL}", secret: "${HOOK_SECRET}"}
    flaky-chat: {type: slack, url: "${FLAKY_CHAT_URL}"}
    down-hook: {type: webhook, url: "${DOWN_URL}", secret: "${HOOK_SECRET}"}
    boss-hook: {type: webhook, url: "${BOSS_URL}", secret: "${HOOK_SECRET}"}
    held-hook: {type: webhook, url: "${HELD_URL}", secret: "${HOOK_SECRET}"}
  roles:
    approver: [hook, chat, mail]
    flaky: [flaky-hook]
    flaky_chat: [flaky-chat]
    broken: [down-hook]
    manager: [boss-hook]
    held: [held-hook]
  keys:
    alice: [chat]
tools:
  - {name: wire, handler: "tests.fixture_tools:echo", risk: high}
  - {name: flaky_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [flaky]}
  - {name: flaky_chat_wire, handler: "tests.fixture_tools:echo", risk: high,
     approvers: [flaky_chat]}
  - {name: broken_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [broken]}
  - {name: held_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [held]}
  - {name: short_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [nobody],
     approval_timeout_s: 1, notify: [hook]}
  - {name: quiet_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [nobody]}
  - {name: slow_wire, handler: "tests.fixture_tools:echo", risk: high, approvers: [lead],
     escalate_after_s: 1, escalate_to: {roles: [manager], keys: [alice]}}
  - {name: two_wire, handler: "tests.fixture_tools:echo", risk: high,
     approvers: [approver, lead], approvals_required: 2}
"""


@dataclass
class Receivers:
    hook: ScriptedServer
    chat: ScriptedServer
    flaky: ScriptedServer
    down: ScriptedServer
    held: ScriptedServer
    held_script: HeldScript
    mailbox: Mailbox

    def seen(self, server: ScriptedServer, request_id: str) -> list[Seen]:
        return [s for s in list(server.seen) if request_id_of(s) == request_id]


@pytest.fixture(scope="module")
def notify_stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Stack, Receivers]]:
    state_dir = tmp_path_factory.mktemp("notify-stack")
    config = state_dir / "tools.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    mailbox = Mailbox(SMTP_PASSWORD)
    smtp = Controller(
        mailbox,
        hostname="127.0.0.1",
        port=free_port(),
        authenticator=mailbox,
        auth_require_tls=False,
    )
    smtp.start()
    held_script = HeldScript("pending")
    servers = [ScriptedServer(s) for s in (accept, accept, FlakyScript(2), refuse, held_script)]
    for server in servers:
        server.__enter__()
    hook, chat, flaky, down, held = servers
    databases = services.database_for("sqlite", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=next(databases),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_CONFIG=str(config),
        TOOLROUTER_PUBLIC_URL=PUBLIC_URL,
        TOOLROUTER_NOTIFY_BACKOFF_S="0.2",
        TOOLROUTER_NOTIFY_MAX_ATTEMPTS="3",
        TOOLROUTER_NOTIFY_TIMEOUT_S="3",
        # An attempt may take at most half of it (Settings.notify_attempt_s).
        TOOLROUTER_DECISION_TIMEOUT_S="6",
        HOOK_URL=f"{hook.url}/hooks/toolrouter",
        HOOK_SECRET=HOOK_SECRET,
        SLACK_URL=f"{chat.url}/services/T000/B000/{SLACK_TOKEN}",
        SMTP_PORT=str(smtp.port),
        SMTP_PASSWORD=SMTP_PASSWORD,
        FLAKY_URL=f"{flaky.url}/flaky",
        FLAKY_CHAT_URL=f"{flaky.url}/chat",
        DOWN_URL=f"{down.url}/down",
        BOSS_URL=f"{hook.url}/hooks/escalation",
        HELD_URL=f"{held.url}/held",
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    runtime.prepare(check_tools=False)
    for name, roles in {
        "agent": ["agent"],
        "approver": ["approver"],
        "flaky": ["flaky"],
        "broken": ["broken"],
        "lead": ["lead"],
        "held": ["held"],
        "operator": ["operator"],
    }.items():
        stack.keys[name] = runtime.keys.create(name, roles)
    runtime.close()
    try:
        stack.start_api()
        stack.start_worker(concurrency=1)
        stack.start_worker(
            name="approvals", queues="approvals,maintenance,notifications", concurrency=2
        )
        yield stack, Receivers(hook, chat, flaky, down, held, held_script, mailbox)
    finally:
        stack.stop_all()
        for server in servers:
            server.__exit__()
        smtp.stop()
        services.flush(redis_url)
        databases.close()


def submit(stack: Stack, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with stack.client("agent") as http:
        body = http.post("/v1/calls", json={"tool": tool, "args": args}).json()
    assert body["status"] == "pending", body
    return body  # type: ignore[no-any-return]


def submit_batch(stack: Stack, calls: list[dict[str, Any]]) -> list[str]:
    """The request ids of a batch of gated calls, in batch order."""
    with stack.client("agent") as http:
        receipt = http.post("/v1/batches", json={"calls": calls}).json()
        assert receipt["accepted"] == len(calls), receipt
        lines = http.get(f"/v1/batches/{receipt['batch_id']}/results").text.splitlines()
    return [json.loads(line)["request_id"] for line in lines]


def deliveries(stack: Stack, **params: str) -> list[dict[str, Any]]:
    with stack.client("operator") as http:
        response = http.get("/v1/notifications", params=params)
    assert response.status_code == 200, response.text
    return response.json()["deliveries"]  # type: ignore[no-any-return]


def settled(stack: Stack, request_id: str, count: int) -> list[dict[str, Any]]:
    """The request's deliveries, once ``count`` of them are delivered or failed."""

    def done() -> list[dict[str, Any]] | None:
        found = deliveries(stack, request_id=request_id)
        final = [d for d in found if d["status"] in ("delivered", "failed")]
        return found if len(final) >= count else None

    return wait_for(done, 30, f"{count} deliveries of {request_id} settled")


def counter(stack: Stack, channel_type: str, outcome: str) -> float:
    with stack.client("") as http:
        text = http.get("/metrics").text
    needle = f'toolrouter_notifications_total{{channel_type="{channel_type}",outcome="{outcome}"}} '
    lines = [line for line in text.splitlines() if line.startswith(needle)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_a_pending_request_reaches_a_webhook_signed_with_its_secret(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    args = {"to": "bob", "amount": 10, "api_token": "tok-do-not-leak", "memo": "m" * 500}
    call = submit(stack, "wire", args)
    request_id = call["request_id"]
    (seen,) = wait_for(lambda: receivers.seen(receivers.hook, request_id), 30, "the webhook")
    assert seen.method == "POST" and seen.target == "/hooks/toolrouter"
    # The receiver's side, as the how-to shows it: HMAC-SHA256 over "<t>.<body>".
    fields = dict(part.split("=", 1) for part in seen.headers["x-toolrouter-signature"].split(","))
    expected = hmac.new(
        HOOK_SECRET.encode(), fields["t"].encode() + b"." + seen.body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    assert abs(int(fields["t"]) - time.time()) < 60
    wrong = hmac.new(b"another-secret", fields["t"].encode() + b"." + seen.body, hashlib.sha256)
    assert not hmac.compare_digest(fields["v1"], wrong.hexdigest())
    body = seen.json()
    assert body["type"] == "approval.pending" and body["event"] == "pending"
    assert (body["tool"], body["requested_by"]) == ("wire", "agent")
    assert body["call_id"] == call["call_id"]
    assert body["url"] == f"{PUBLIC_URL}/ui/#{request_id}"
    assert "bob" in body["args_summary"] and "tok-do-not-leak" not in body["args_summary"]
    assert len(body["args_summary"]) <= 300
    assert 3500 < body["expires_in_s"] <= 3600
    assert HOOK_SECRET not in seen.body.decode()
    # Each channel's delivery is recorded: channel, event, attempts, status, times.
    found = settled(stack, request_id, 3)
    by_channel = {d["channel"]: d for d in found}
    assert set(by_channel) == {"hook", "chat", "mail"}
    hook = by_channel["hook"]
    assert (hook["event"], hook["status"], hook["attempts"]) == ("pending", "delivered", 1)
    assert hook["channel_type"] == "webhook" and hook["last_error"] is None
    assert hook["created_at"] <= hook["delivered_at"]


def test_slack_message_names_the_tool_requester_expiry_and_links_the_inbox(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    call = submit(stack, "wire", {"to": "<@channel> carol", "amount": 5, "password": "hunter22"})
    request_id = call["request_id"]
    (seen,) = wait_for(lambda: receivers.seen(receivers.chat, request_id), 30, "the Slack post")
    assert seen.target == f"/services/T000/B000/{SLACK_TOKEN}"
    message = seen.json()
    text = json.dumps(message)
    assert message["text"].startswith(f"Approval needed: wire ({request_id})")
    link = f"<{PUBLIC_URL}/ui/#{request_id}|Open in the inbox>"
    assert link in message["text"]
    detail = shown(message["blocks"][1])
    assert "Tool: wire" in detail and "Requested by: agent" in detail
    assert "Expires in: 59 min" in detail or "Expires in: 1 h 0 min" in detail
    # Arguments are a summary, shown as written (never parsed), secret-looking values masked.
    assert '"to": "<@channel> carol"' in detail
    assert not any("@channel" in text for text in parsed(message))
    assert "hunter22" not in text and '"password": "***"' in detail
    # The one link is to the inbox: nothing in the message decides by itself.
    assert SLACK_TOKEN not in text
    assert links(message) == {f"{PUBLIC_URL}/ui/#{request_id}"}


def test_email_has_plain_and_html_parts_with_the_inbox_link_and_no_secret(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    call = submit(stack, "wire", {"to": "dave", "amount": 7, "memo": "<script>alert(1)</script>"})
    request_id = call["request_id"]

    def mail() -> EmailMessage | None:
        found = [m for m in receivers.mailbox.messages if request_id in str(m["Subject"])]
        return found[0] if found else None

    message = wait_for(mail, 30, "the email")
    assert message["From"] == "toolrouter@example.test"
    assert message["To"] == "approvers@example.test"
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    plain_text, html_text = plain.get_content(), html.get_content()
    link = f"{PUBLIC_URL}/ui/#{request_id}"
    assert f"Open in the inbox: {link}" in plain_text
    assert f'<a href="{link}">' in html_text
    assert "Requested by: agent" in plain_text and "dave" in plain_text
    assert "<script>" not in html_text and "&lt;script&gt;" in html_text
    raw = message.as_string()
    assert SMTP_PASSWORD not in raw and HOOK_SECRET not in raw
    assert ("toolrouter", SMTP_PASSWORD) in receivers.mailbox.logins


def test_a_batch_of_gated_calls_is_one_message_for_people_and_one_post_each_for_a_webhook(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    calls = [{"tool": "wire", "args": {"to": f"payee-{i}", "amount": i}} for i in range(12)]
    request_ids = submit_batch(stack, calls)
    for request_id in request_ids:
        found = settled(stack, request_id, 3)
        assert sorted((d["channel"], d["status"]) for d in found) == [
            ("chat", "delivered"),
            ("hook", "delivered"),
            ("mail", "delivered"),
        ]
        # A program's receiver still gets each request on its own, signed.
        assert len(receivers.seen(receivers.hook, request_id)) == 1

    def about_these(text: str) -> bool:
        return any(request_id in text for request_id in request_ids)

    (post,) = [s for s in list(receivers.chat.seen) if about_these(s.body.decode())]
    message = post.json()
    assert message["text"].startswith("Approval needed: 12 requests (wire)")
    listed = shown(message["blocks"][1])
    assert len(listed.splitlines()) == 10
    inbox = {f"{PUBLIC_URL}/ui/", *(f"{PUBLIC_URL}/ui/#{r}" for r in request_ids)}
    assert len(links(message)) == 11 and links(message) <= inbox  # ten requests, the inbox
    assert "wire by agent" in listed and "payee-0" in listed
    assert "2 more not listed" in shown(message["blocks"][2])
    (mail,) = [m for m in list(receivers.mailbox.messages) if about_these(m.as_string())]
    assert str(mail["Subject"]) == "[toolrouter] Approval needed: 12 requests (wire)"
    plain = mail.get_body(("plain",))
    assert plain is not None
    assert plain.get_content().count(f"{PUBLIC_URL}/ui/#req-") == 10
    assert f"2 more not listed. Every one is in the inbox: {PUBLIC_URL}/ui/" in (
        plain.get_content()
    )


def test_a_decision_and_an_expiry_are_announced_too(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    approved = submit(stack, "wire", {"to": "erin", "amount": 1})["request_id"]
    denied = submit(stack, "wire", {"to": "frank", "amount": 1})["request_id"]
    with stack.client("approver") as http:
        assert http.post(f"/v1/approvals/{approved}/approve", json={}).json()["released"]
        assert http.post(f"/v1/approvals/{denied}/deny", json={}).json()["status"] == "denied"

    def events(request_id: str) -> set[str]:
        return {s.json()["event"] for s in receivers.seen(receivers.hook, request_id)}

    wait_for(lambda: events(approved) == {"pending", "approved"}, 30, "the approval announced")
    wait_for(lambda: events(denied) == {"pending", "denied"}, 30, "the denial announced")
    # Expiry: a tool whose own `notify` names the channel (its role names none).
    short = submit(stack, "short_wire", {"to": "gina", "amount": 1})
    with stack.client("operator") as http:
        expires_at = http.get(f"/v1/approvals/{short['request_id']}").json()["request"][
            "expires_at"
        ]
    wait_for(lambda: time.time() * 1000 > expires_at, 10, "the request's expiry passing")
    app = make_celery(stack.env["TOOLROUTER_REDIS_URL"], Runtime(stack.settings).namespace)
    app.send_task(EXPIRE_TASK, queue=MAINTENANCE_QUEUE, routing_key=MAINTENANCE_QUEUE)
    wait_for(
        lambda: events(short["request_id"]) == {"pending", "expired"}, 30, "the expiry announced"
    )


def test_deliveries_are_listed_by_event_and_an_unknown_event_is_refused(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, _ = notify_stack
    request_id = submit(stack, "wire", {"to": "hal", "amount": 1})["request_id"]
    with stack.client("approver") as http:
        assert http.post(f"/v1/approvals/{request_id}/approve", json={}).json()["released"]

    def both_planned() -> list[dict[str, Any]] | None:
        # Each event's deliveries are planned together: once both show, all of them do.
        found = deliveries(stack, request_id=request_id)
        return found if {d["event"] for d in found} == {"pending", "approved"} else None

    every = wait_for(both_planned, 30, "the request's pending and approved deliveries")
    for event in (NotifyEvent.PENDING, NotifyEvent.APPROVED):
        listed = deliveries(stack, request_id=request_id, event=str(event))
        assert listed, event
        assert sorted(d["id"] for d in listed) == sorted(
            d["id"] for d in every if d["event"] == event
        )
    assert deliveries(stack, request_id=request_id, event=str(NotifyEvent.DENIED)) == []
    with stack.client("operator") as http:
        for event in ("approve", "", "x" * 10_000):
            response = http.get("/v1/notifications", params={"event": event})
            assert response.status_code == 422, response.text
            assert response.json()["error"].startswith("unknown event: "), response.text
            assert len(response.json()["error"]) < 200


def test_a_receiver_answering_503_twice_gets_it_on_the_third_attempt(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    retried_before = counter(stack, "webhook", "retried")
    request_id = submit(stack, "flaky_wire", {"to": "hank", "amount": 3})["request_id"]
    (delivery,) = settled(stack, request_id, 1)
    assert (delivery["channel"], delivery["status"], delivery["attempts"]) == (
        "flaky-hook",
        "delivered",
        3,
    )
    assert delivery["last_error"] == "HTTP 503"
    attempts = receivers.seen(receivers.flaky, request_id)
    # Each attempt says which delivery it is: a receiver can drop the repeats it got.
    assert [seen.json()["delivery_id"] for seen in attempts] == [delivery["id"]] * 3
    assert counter(stack, "webhook", "retried") >= retried_before + 2


def test_a_digest_answered_503_twice_is_sent_again_whole_and_recorded_for_each_request(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    calls = [{"tool": "flaky_chat_wire", "args": {"to": f"jay-{i}", "amount": i}} for i in range(3)]
    request_ids = submit_batch(stack, calls)
    for request_id in request_ids:
        (delivery,) = settled(stack, request_id, 1)
        assert (delivery["channel"], delivery["status"], delivery["attempts"]) == (
            "flaky-chat",
            "delivered",
            3,
        )
        assert delivery["last_error"] == "HTTP 503"
    posts = [s for s in list(receivers.flaky.seen) if request_ids[0] in s.body.decode()]
    # Three tries of one message, each naming all three requests.
    assert len(posts) == 3
    assert all(all(r in post.body.decode() for r in request_ids) for post in posts)


def plan_quiet(stack: Stack, count: int) -> tuple[list[dict[str, Any]], list[str]]:
    """``count`` gated calls whose tool has no channel, each with a ``hook`` delivery
    planned by hand and no message queued for it: as if its message were lost."""
    calls = [submit(stack, "quiet_wire", {"to": f"lo-{i}", "amount": i}) for i in range(count)]
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.transaction() as conn:
            ids = [
                delivery_rows.plan(
                    conn,
                    request_id=call["request_id"],
                    call_id=call["call_id"],
                    tool="quiet_wire",
                    event=NotifyEvent.PENDING,
                    channels=[("hook", "webhook")],
                    now=int(time.time() * 1000),
                )[0].id
                for call in calls
            ]
    finally:
        runtime.close()
    return calls, ids


def test_a_forged_message_naming_several_webhook_deliveries_sends_one_and_fails_none(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    """Redis is not trusted to group deliveries: a webhook never gets a digest, so a list
    of its deliveries is one attempt at the first, the others left to their own messages."""
    stack, receivers = notify_stack
    calls, ids = plan_quiet(stack, 3)
    runtime = Runtime(stack.settings)
    try:
        app = make_celery(stack.env["TOOLROUTER_REDIS_URL"], runtime.namespace)
        app.send_task(
            DELIVER_TASK, args=[ids], queue=NOTIFICATIONS_QUEUE, routing_key=NOTIFICATIONS_QUEUE
        )
    finally:
        runtime.close()
    (first,) = settled(stack, calls[0]["request_id"], 1)
    assert first["status"] == "delivered", first
    assert len(receivers.seen(receivers.hook, calls[0]["request_id"])) == 1
    for call in calls[1:]:
        (left,) = deliveries(stack, request_id=call["request_id"])
        assert (left["status"], left["attempts"]) == ("pending", 0), left


def test_a_forged_message_cannot_spend_a_delivery_s_attempts_before_its_backoff(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    (waiting, due), (waiting_id, due_id) = plan_quiet(stack, 2)
    hour_ahead = int(time.time() * 1000) + 3_600_000
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.transaction() as conn:
            conn.execute(
                update(notification_deliveries)
                .where(notification_deliveries.c.id == waiting_id)
                .values(status="retrying", attempts=1, next_attempt_at=hour_ahead)
            )
        app = make_celery(stack.env["TOOLROUTER_REDIS_URL"], runtime.namespace)
        # One message: the due delivery is tried once the one in backoff is passed over.
        app.send_task(
            DELIVER_TASK,
            args=[[waiting_id, due_id]],
            queue=NOTIFICATIONS_QUEUE,
            routing_key=NOTIFICATIONS_QUEUE,
        )
    finally:
        runtime.close()

    def handled() -> bool:
        (first,) = deliveries(stack, request_id=waiting["request_id"])
        (second,) = deliveries(stack, request_id=due["request_id"])
        return first["attempts"] != 1 or second["status"] == "delivered"

    wait_for(handled, 30, "the forged message handled")
    (left,) = deliveries(stack, request_id=waiting["request_id"])
    assert (left["status"], left["attempts"], left["next_attempt_at"]) == (
        "retrying",
        1,
        hour_ahead,
    )
    assert receivers.seen(receivers.hook, waiting["request_id"]) == []


def test_deliveries_whose_message_or_attempt_was_lost_are_sent_by_the_resend_sweep(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    """A message lost with a killed worker or a Redis restart, and an attempt whose process
    died mid-send, left deliveries open or ``sending`` for ever: nothing queued them again."""
    stack, receivers = notify_stack
    failed_before = counter(stack, "webhook", "failed")
    calls, (lost_id, sending_id, spent_id, recent_id) = plan_quiet(stack, 4)
    now = int(time.time() * 1000)
    hour_ago = now - 3_600_000
    rows = notification_deliveries
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.transaction() as conn:
            conn.execute(update(rows).where(rows.c.id == lost_id).values(next_attempt_at=hour_ago))
            # The last one's attempt is under way: the sweep must leave it be.
            for delivery_id, attempts, changed in (
                (sending_id, 1, hour_ago),
                (spent_id, 3, hour_ago),
                (recent_id, 1, now),
            ):
                conn.execute(
                    update(rows)
                    .where(rows.c.id == delivery_id)
                    .values(status="sending", attempts=attempts, updated_at=changed)
                )
        app = make_celery(stack.env["TOOLROUTER_REDIS_URL"], runtime.namespace)
        app.send_task(RESEND_TASK, queue=MAINTENANCE_QUEUE, routing_key=MAINTENANCE_QUEUE)
    finally:
        runtime.close()
    lost, sending, spent = (settled(stack, call["request_id"], 1)[0] for call in calls[:3])
    assert (lost["status"], lost["attempts"], lost["last_error"]) == ("delivered", 1, None)
    assert (sending["status"], sending["attempts"]) == ("delivered", 2)
    assert sending["last_error"] == "interrupted while sending"
    assert (spent["status"], spent["attempts"]) == ("failed", 3)
    assert spent["last_error"] == "interrupted while sending"
    assert counter(stack, "webhook", "failed") >= failed_before + 1
    assert len(receivers.seen(receivers.hook, calls[0]["request_id"])) == 1
    assert receivers.seen(receivers.hook, calls[2]["request_id"]) == []
    (recent,) = deliveries(stack, request_id=calls[3]["request_id"])
    assert (recent["status"], recent["attempts"]) == ("sending", 1), recent


def test_a_receiver_that_always_fails_changes_nothing_for_the_call_or_its_approval(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    failed_before = counter(stack, "webhook", "failed")
    call = submit(stack, "broken_wire", {"to": "ivan", "amount": 4})
    (delivery,) = settled(stack, call["request_id"], 1)
    assert (delivery["status"], delivery["attempts"], delivery["last_error"]) == (
        "failed",
        3,
        "HTTP 500",
    )
    assert len(receivers.seen(receivers.down, call["request_id"])) == 3
    assert counter(stack, "webhook", "failed") == failed_before + 1
    listed = deliveries(stack, status="failed")
    assert call["request_id"] in {d["request_id"] for d in listed}
    # The approval goes through as ever.
    with stack.client("broken") as http:
        answer = http.post(
            f"/v1/approvals/{call['request_id']}/approve", json={"wait_s": 20}
        ).json()
    assert answer["status"] == "succeeded" and answer["value"] == {"to": "ivan", "amount": 4}


def test_a_notice_due_again_after_its_request_was_decided_is_not_sent(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    """The receiver is down while the request is approved: the "approval needed" notice
    it failed is not retried after the decision, where it would follow "approved"."""
    stack, receivers = notify_stack
    skipped_before = counter(stack, "webhook", "skipped")
    request_id = submit(stack, "held_wire", {"to": "kim", "amount": 5})["request_id"]
    wait_for(
        lambda: receivers.seen(receivers.held, request_id), 30, "the notice reaching its receiver"
    )
    with stack.client("held") as http:
        assert http.post(f"/v1/approvals/{request_id}/approve", json={}).json()["released"]
    receivers.held_script.release()  # the held attempt now fails: a retry is due

    def by_event() -> dict[str, dict[str, Any]] | None:
        found = {d["event"]: d for d in deliveries(stack, request_id=request_id)}
        final = ("delivered", "failed", "skipped")
        done = set(found) == {"pending", "approved"}
        return found if done and all(d["status"] in final for d in found.values()) else None

    found = wait_for(by_event, 30, "both notices settled")
    # One attempt was made (held, then failed); the retry taken after the decision was not.
    assert (
        found["pending"]["status"],
        found["pending"]["last_error"],
        found["pending"]["attempts"],
    ) == ("skipped", "not sent: the request is no longer pending", 1), found["pending"]
    assert found["approved"]["status"] == "delivered", found["approved"]
    assert counter(stack, "webhook", "skipped") == skipped_before + 1


def test_each_edit_that_leaves_the_request_pending_is_told_to_the_approvers(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    """Two of two needed: a first decision that edits, then an approval, then an edit that
    resets it; each edit is told once, with its editor and the arguments as edited (the
    first to an approver who had read only the first notice's arguments)."""
    stack, receivers = notify_stack
    request_id = submit(stack, "two_wire", {"to": "lee", "amount": 900})["request_id"]

    def decide(key: str, body: dict[str, Any]) -> dict[str, Any]:
        with stack.client(key) as http:
            response = http.post(f"/v1/approvals/{request_id}/approve", json=body)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def told() -> list[dict[str, Any]]:
        return [seen.json() for seen in receivers.seen(receivers.hook, request_id)]

    def events_told(count: int) -> list[dict[str, Any]]:
        return wait_for(
            lambda: found if len(found := told()) >= count else None,
            30,
            f"{count} webhook notices of {request_id}",
        )

    events_told(1)
    assert not decide("lead", {"args": {"to": "lee", "amount": 90}})["released"]
    events_told(2)
    assert not decide("approver", {"args": {"to": "lee", "amount": 9}})["released"]
    events_told(3)
    assert decide("lead", {})["released"]

    notices = events_told(4)
    assert [n["event"] for n in notices] == ["pending", "edited", "edited", "approved"]
    first, second = notices[1], notices[2]
    assert (first["edited_by"], first["args_summary"]) == ("lead", '{"amount": 90, "to": "lee"}')
    assert (second["edited_by"], second["args_summary"]) == (
        "approver",
        '{"amount": 9, "to": "lee"}',
    )
    # Told on the channels of the request's roles: Slack and email say it too.
    edited = [d for d in deliveries(stack, request_id=request_id) if d["event"] == "edited"]
    assert sorted(d["channel"] for d in edited) == sorted(["hook", "chat", "mail"] * 2)


def test_a_tool_whose_approvers_have_no_channel_sends_nothing(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, _ = notify_stack
    request_id = submit(stack, "quiet_wire", {"to": "judy", "amount": 1})["request_id"]
    assert deliveries(stack, request_id=request_id) == []


def test_operators_only_read_deliveries_and_no_secret_is_logged(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, _ = notify_stack
    with stack.client("agent") as http:
        assert http.get("/v1/notifications").status_code == 403
    with stack.client("operator") as http:
        assert http.get("/v1/notifications", params={"status": "lost"}).status_code == 422
    everything = json.dumps(deliveries(stack, limit="500"))
    logs = "".join(stack.log(name) for name in ("api", "worker", "approvals"))
    for secret in (HOOK_SECRET, SLACK_TOKEN, SMTP_PASSWORD):
        assert secret not in everything
        assert secret not in logs


def sweep(stack: Stack, times: int) -> None:
    """Queue the escalation sweep as beat does, ``times`` at once (they overlap)."""
    app = make_celery(stack.env["TOOLROUTER_REDIS_URL"], Runtime(stack.settings).namespace)
    for _ in range(times):
        app.send_task(ESCALATE_TASK, queue=MAINTENANCE_QUEUE, routing_key=MAINTENANCE_QUEUE)


def due_for_escalation(stack: Stack, request_id: str) -> None:
    with stack.client("operator") as http:
        created_at = http.get(f"/v1/approvals/{request_id}").json()["request"]["created_at"]
    wait_for(lambda: time.time() * 1000 > created_at + 1000, 10, "escalate_after_s passing")


def test_an_undecided_request_is_escalated_once_to_its_group_and_a_decided_one_never(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, receivers = notify_stack
    waiting = submit(stack, "slow_wire", {"to": "kim", "amount": 9})
    decided = submit(stack, "slow_wire", {"to": "lou", "amount": 9})["request_id"]
    with stack.client("lead") as http:
        assert http.post(f"/v1/approvals/{decided}/deny", json={}).json()["status"] == "denied"
    request_id = waiting["request_id"]
    due_for_escalation(stack, request_id)
    sweep(stack, 4)

    def boss(about: str) -> list[Seen]:
        return [s for s in receivers.seen(receivers.hook, about) if "escalation" in s.target]

    (seen,) = wait_for(lambda: boss(request_id), 30, "the escalation webhook")
    body = seen.json()
    assert (body["type"], body["event"]) == ("approval.escalated", "escalated")
    assert body["escalated_to"] == {"roles": ["manager"], "keys": ["alice"]}
    assert (body["request_id"], body["call_id"], body["tool"]) == (
        request_id,
        waiting["call_id"],
        "slow_wire",
    )
    (chat,) = wait_for(lambda: receivers.seen(receivers.chat, request_id), 30, "the Slack post")
    assert chat.json()["text"].startswith("Escalated, still waiting for a decision: slow_wire")
    assert "role manager, key alice" in json.dumps(chat.json())
    found = settled(stack, request_id, 2)
    assert sorted((d["event"], d["channel"], d["status"]) for d in found) == [
        ("escalated", "boss-hook", "delivered"),
        ("escalated", "chat", "delivered"),
    ]
    # Sweeps queued after a later request falls due ran after the first ones: the first
    # request is not told again, and the denied one never was.
    later = submit(stack, "slow_wire", {"to": "max", "amount": 9})["request_id"]
    due_for_escalation(stack, later)
    sweep(stack, 2)
    wait_for(lambda: boss(later), 30, "the later request's escalation")
    assert len(boss(request_id)) == 1 and len(deliveries(stack, request_id=request_id)) == 2
    assert deliveries(stack, request_id=decided) == []
    # The request itself is untouched: still pending, decidable by its own approvers.
    with stack.client("lead") as http:
        shown = http.get(f"/v1/approvals/{request_id}").json()["request"]
        assert http.get(f"/v1/approvals/{decided}").json()["request"]["escalation"] is None
    assert shown["status"] == "pending"
    assert shown["escalation"]["to"] == {"roles": ["manager"], "keys": ["alice"]}
    assert shown["escalation"]["channels"] == ["boss-hook", "chat"]
    assert shown["created_at"] + 1000 <= shown["escalation"]["at"] <= body["sent_at"]
    # Those told of the escalation hear the decision too, though no approver role names
    # their channels; the request decided before it escalated told them nothing.
    with stack.client("lead") as http:
        answer = http.post(f"/v1/approvals/{request_id}/approve", json={}).json()
        assert answer["status"] == "approved", answer

    def told(about: str, event: str) -> list[Seen]:
        return [s for s in boss(about) if s.json()["event"] == event]

    wait_for(lambda: told(request_id, "approved"), 30, "the approval on the escalation hook")
    wait_for(lambda: len(receivers.seen(receivers.chat, request_id)) == 2, 30, "the Slack approval")
    assert deliveries(stack, request_id=decided) == []


def test_the_inbox_shows_an_escalated_request_with_when_and_to_whom(
    notify_stack: tuple[Stack, Receivers],
) -> None:
    stack, _ = notify_stack
    request_id = submit(stack, "slow_wire", {"to": "ned", "amount": 2})["request_id"]
    due_for_escalation(stack, request_id)
    sweep(stack, 1)
    settled(stack, request_id, 2)
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        signed_in = http.post(
            "/ui/login", data={"key": stack.keys["lead"]}, headers={"Origin": stack.base_url}
        )
        assert signed_in.status_code == 303, signed_in.text[:300]
        page = http.get("/ui/").text
    card = page[page.index(f'id="{request_id}"') :]
    card = card[: card.index("</article>")]
    badge = re.search(r'<span class="escalated"[^>]*>(.*?)</span>', card, re.DOTALL)
    assert badge is not None, card
    text = " ".join(badge.group(1).split())
    assert re.fullmatch(r"escalated \d+ s ago to role manager, key alice", text), text
    with stack.client("lead") as http:
        http.post(f"/v1/approvals/{request_id}/deny", json={})
