"""An edit that leaves its request pending is told once, as the edit it was: two edits in one
millisecond are two notices, and a notice of an edit that a later one replaced before it
went is not sent with the later edit's words. Real gate, courier and webhook receiver,
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from approvals.gate import Gate
from router.clock import FakeClock
from router.metrics import NotifyOutcome
from router.notify.courier import EDITED_AGAIN, EDITED_SINCE
from router.notify.deliveries import get
from router.notify.deliveries import recent as deliveries_of_request
from router.notify.model import DeliveryStatus, NotifyEvent
from router.runtime import Runtime

from ..support.receivers import accept
from ..support.runtimes import in_process_runtime
from ..support.scripted_http import ScriptedServer

CONFIG = """
notifications:
  channels:
    hook: {type: webhook, url: "${EDITED_HOOK_URL}", secret: "${EDITED_HOOK_SECRET}"}
  roles:
    approver: [hook]
tools:
  - {name: two_wire, handler: "tests.fixture_tools:echo", risk: high,
     approvers: [approver, lead], approvals_required: 2}
"""


@pytest.fixture
def hook() -> Iterator[ScriptedServer]:
    with ScriptedServer(accept) as server:
        yield server


@pytest.fixture
def notifying(
    database_url: str,
    redis_base: str,
    tmp_path: Path,
    clock: FakeClock,
    hook: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Runtime]:
    """A runtime whose approvers are told on ``hook``."""
    monkeypatch.setenv("EDITED_HOOK_URL", f"{hook.url}/hook")
    monkeypatch.setenv("EDITED_HOOK_SECRET", "whsec-0123456789abcdef-edited")
    config = tmp_path / "tools.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with in_process_runtime(database_url, redis_base, tmp_path, clock, config) as runtime:
        for name, roles in {"approver": ["approver"], "lead": ["lead"]}.items():
            runtime.keys.create(name, roles)
        yield runtime


def test_each_edit_is_told_once_and_a_replaced_one_not_at_all(
    notifying: Runtime, hook: ScriptedServer
) -> None:
    runtime = notifying
    call = runtime.dispatcher.submit("agent", "two_wire", {"to": "lee", "amount": 900})
    request_id = str(call.request_id)
    gate = Gate(runtime, runtime.notifier())
    assert gate.decide(request_id, "approver", "approve").ok
    # The clock stands still: two edits in one millisecond are still two edits.
    assert not gate.decide(request_id, "lead", "approve", args={"to": "lee", "amount": 90}).released
    (first,) = runtime.courier.fan_out(NotifyEvent.EDITED, [request_id])
    assert runtime.courier.fan_out(NotifyEvent.EDITED, [request_id]) == []
    edited = {"to": "lee", "amount": 9}
    assert not gate.decide(request_id, "approver", "approve", args=edited).released
    (second,) = runtime.courier.fan_out(NotifyEvent.EDITED, [request_id])

    # The first edit's notice, due after the second edit: it would tell the second's words.
    assert runtime.courier.attempt_many([first.id]).outcome is NotifyOutcome.SKIPPED
    assert runtime.courier.attempt_many([second.id]).outcome is NotifyOutcome.DELIVERED
    (told,) = [seen.json() for seen in hook.seen]
    assert (told["event"], told["edited_by"]) == ("edited", "approver")
    with runtime.store.reading() as conn:
        skipped = get(conn, first.id)
    assert skipped is not None
    assert (skipped.status, skipped.last_error, skipped.attempts) == (
        DeliveryStatus.SKIPPED,
        EDITED_AGAIN,
        0,
    )


def test_every_edit_that_leaves_the_request_pending_is_told(
    notifying: Runtime, hook: ScriptedServer
) -> None:
    """A first decision that edits resets nobody's approval, yet an approver who has not
    decided holds only the first notice's arguments: each edit is told, as is an editor's
    second edit; the approval that releases the call is told as such."""
    runtime = notifying
    call = runtime.dispatcher.submit("agent", "two_wire", {"to": "lee", "amount": 900})
    request_id = str(call.request_id)
    gate = Gate(runtime, runtime.notifier())
    told: list[tuple[NotifyEvent, list[str]]] = []
    runtime.announcer.announce = lambda event, requests: told.append(  # type: ignore[method-assign]
        (event, [r.request_id for r in requests])
    )
    assert not gate.decide(request_id, "lead", "approve", args={"to": "lee", "amount": 9}).released
    assert told == [(NotifyEvent.EDITED, [request_id])]
    assert not gate.decide(request_id, "lead", "approve", args={"to": "lee", "amount": 7}).released
    assert told == [(NotifyEvent.EDITED, [request_id])] * 2
    assert not gate.decide(
        request_id, "approver", "approve", args={"to": "lee", "amount": 8}
    ).released
    assert told == [(NotifyEvent.EDITED, [request_id])] * 3
    assert gate.decide(request_id, "lead", "approve").released
    assert told[3:] == [(NotifyEvent.APPROVED, [request_id])]


def test_an_approval_needed_notice_due_after_an_edit_is_not_sent(
    notifying: Runtime, hook: ScriptedServer
) -> None:
    """A retried "approval needed" would show the edited arguments as the agent's, with no
    word of the edit: the edit's own notice tells them, on the same channels."""
    runtime = notifying
    call = runtime.dispatcher.submit("agent", "two_wire", {"to": "lee", "amount": 10})
    request_id = str(call.request_id)
    (needed,) = runtime.courier.fan_out(NotifyEvent.PENDING, [request_id])
    gate = Gate(runtime, runtime.notifier())
    edited = {"to": "lee", "amount": 99999}
    assert not gate.decide(request_id, "approver", "approve", args=edited).released
    (edit,) = runtime.courier.fan_out(NotifyEvent.EDITED, [request_id])

    assert runtime.courier.attempt_many([needed.id]).outcome is NotifyOutcome.SKIPPED
    assert runtime.courier.attempt_many([edit.id]).outcome is NotifyOutcome.DELIVERED
    (told,) = [seen.json() for seen in hook.seen]
    assert (told["event"], told["edited_by"]) == ("edited", "approver")
    with runtime.store.reading() as conn:
        skipped = get(conn, needed.id)
    assert skipped is not None
    assert (skipped.status, skipped.last_error) == (DeliveryStatus.SKIPPED, EDITED_SINCE)


def test_an_approval_needed_notice_is_sent_where_no_edit_notice_is_planned(
    notifying: Runtime, hook: ScriptedServer
) -> None:
    """The edit's own notice may never be planned (its message lost with Redis): then the
    channel would hear nothing of the request, so the first notice still goes."""
    runtime = notifying
    call = runtime.dispatcher.submit("agent", "two_wire", {"to": "lee", "amount": 10})
    request_id = str(call.request_id)
    (needed,) = runtime.courier.fan_out(NotifyEvent.PENDING, [request_id])
    gate = Gate(runtime, runtime.notifier())
    edited = {"to": "lee", "amount": 11}
    assert not gate.decide(request_id, "approver", "approve", args=edited).released
    assert runtime.courier.attempt_many([needed.id]).outcome is NotifyOutcome.DELIVERED
    (told,) = [seen.json() for seen in hook.seen]
    assert (told["event"], told["request_id"]) == ("pending", request_id)


def test_a_request_decided_before_its_notice_is_planned_records_it_skipped(
    notifying: Runtime, hook: ScriptedServer
) -> None:
    """Decided before the notification worker got to it, a request's "approval needed" is
    not sent, and its delivery says so: never told is not no channel at all."""
    runtime = notifying
    call = runtime.dispatcher.submit("agent", "two_wire", {"to": "lee", "amount": 10})
    request_id = str(call.request_id)
    gate = Gate(runtime, runtime.notifier())
    assert gate.decide(request_id, "approver", "deny").ok
    assert runtime.courier.fan_out(NotifyEvent.PENDING, [request_id]) == []
    with runtime.store.reading() as conn:
        rows = deliveries_of_request(conn, request_id=request_id)
    assert [(d.event, d.status, d.last_error, d.attempts) for d in rows] == [
        (
            NotifyEvent.PENDING,
            DeliveryStatus.SKIPPED,
            "not sent: the request is no longer pending",
            0,
        )
    ]
    assert hook.seen == []
