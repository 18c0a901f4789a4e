"""A tool's ``escalate_after_s`` and ``escalate_to``: what the config accepts, the channels an
escalation is told on, and every mistake refused at load time naming the file and tool."""

from __future__ import annotations

import pytest

from router.constants import ESCALATE_TASK, MAINTENANCE_QUEUE, RESEND_TASK
from router.errors import ConfigError
from router.messaging.namespace import Namespace
from router.notify.content import Notice, webhook_body
from router.notify.model import NotifyEvent
from router.settings import Settings
from router.tools.config import parse_config
from workers.celeryconfig import worker_settings

GOOD = """
notifications:
  channels:
    boss-hook: {type: webhook, url: "https://boss.test/hook", secret: "${HOOK_SECRET}"}
    alice-mail: {type: email, host: smtp.test, from_addr: a@test, to: [alice@test]}
  roles:
    manager: [boss-hook]
  keys:
    alice: [alice-mail, boss-hook]
tools:
  - {name: wire, handler: "m:f", risk: high, approval_timeout_s: 600,
     escalate_after_s: 300, escalate_to: {roles: [manager], keys: [alice]}}
  - {name: plain, handler: "m:f", risk: high}
"""
ENV = {"HOOK_SECRET": "0123456789abcdef-x"}


def test_an_escalation_is_told_on_its_roles_then_its_keys_channels_each_once() -> None:
    config = parse_config(GOOD, file="t.yaml", env=ENV)
    wire, plain = config.tools
    assert wire.escalate_after_s == 300 and wire.escalate_to is not None
    assert config.notifications.escalation_channels(wire.escalate_to) == [
        "boss-hook",
        "alice-mail",
    ]
    assert plain.escalate_after_s is None and plain.escalate_to is None


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (("escalate_after_s: 300", "escalate_after_s: 0"), "escalate_after_s"),
        (("escalate_after_s: 300", "escalate_after_s: 900"), "less than approval_timeout_s"),
        ((", escalate_to: {roles: [manager], keys: [alice]}", ""), "must be set together"),
        (("escalate_after_s: 300, ", ""), "must be set together"),
        (("{roles: [manager], keys: [alice]}", "{}"), "at least one role or key"),
        (("roles: [manager]", "roles: [boss]"), "boss has no channels in notifications.roles"),
        (("keys: [alice]}}", "keys: [bob]}}"), "bob has no channels in notifications.keys"),
        (("keys: [alice]}}", "keys: [' alice']}}"), "escalate_to.keys: bad name"),
        (("roles: [manager]", "roles: ['man ager']"), "escalate_to.roles: bad name"),
        (("roles: [manager],", "roles: [manager], pager: [x],"), "pager: unknown key"),
        (("alice: [alice-mail, boss-hook]", "alice: [pager]"), "keys.alice: unknown channel"),
    ],
)
def test_a_bad_escalation_is_refused_naming_file_and_tool(
    change: tuple[str, str], complaint: str
) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(ConfigError) as caught:
        parse_config(text, file="t.yaml", env=ENV)
    assert "t.yaml" in str(caught.value) and complaint in str(caught.value)
    if "keys.alice" not in complaint:
        assert "wire" in str(caught.value)


def test_an_escalated_webhook_names_the_group_and_the_wait() -> None:
    notice = Notice(
        event=NotifyEvent.ESCALATED,
        request_id="req-1",
        call_id="call_1",
        tool="wire",
        requested_by="agent",
        approvers=("approver",),
        approvals_required=1,
        args_sha256="0" * 64,
        args_summary="{}",
        created_at=1_000_000,
        expires_at=1_600_000,
        link="https://inbox.test/ui/#req-1",
        at=1_300_000,
        escalated_roles=("manager",),
        escalated_keys=("alice",),
    )
    assert notice.headline.startswith("Escalated")
    assert ("Escalated to", "role manager, key alice") in notice.facts()
    assert ("Waiting for", "5 min 0 s") in notice.facts()
    assert b'"escalated_to":{"roles":["manager"],"keys":["alice"]}' in webhook_body(notice)


def test_beat_runs_the_escalation_sweep_on_the_maintenance_queue() -> None:
    settings = Settings(expiry_interval_s=3)
    conf = worker_settings(settings, "redis://127.0.0.1:1/0", Namespace.of(settings))
    entry = conf["beat_schedule"]["escalate-requests"]
    assert entry["task"] == ESCALATE_TASK and entry["schedule"] == 3
    assert entry["options"]["queue"] == MAINTENANCE_QUEUE


def test_beat_runs_the_sweep_of_lost_notifications_on_the_reconcilers_interval() -> None:
    settings = Settings(reconciler_interval_s=7)
    conf = worker_settings(settings, "redis://127.0.0.1:1/0", Namespace.of(settings))
    entry = conf["beat_schedule"]["resend-notifications"]
    assert entry["task"] == RESEND_TASK and entry["schedule"] == 7
    assert entry["options"]["queue"] == MAINTENANCE_QUEUE
