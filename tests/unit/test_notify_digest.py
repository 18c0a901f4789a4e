"""Digests: which deliveries share a message, and what a digest says on Slack and by email."""

from __future__ import annotations

import json

from router.notify.content import Notice
from router.notify.digest import (
    LISTED,
    PER_MESSAGE,
    SLACK_SECTION_CHARS,
    Digest,
    Planned,
    email_digest,
    grouped,
    slack_digest,
)
from router.notify.model import NotifyEvent

INBOX = "https://inbox.example.test/ui/"


def planned(i: int, channel: str, kind: str, event: str = "pending") -> Planned:
    return Planned(f"ntf_{i}", channel, kind, event)


def notice(i: int, tool: str = "wire", summary: str = '{"to": "bob"}') -> Notice:
    return Notice(
        event=NotifyEvent.PENDING,
        request_id=f"req-{i}",
        call_id=f"call_{i}",
        tool=tool,
        requested_by="agent-7",
        approvers=("approver",),
        approvals_required=1,
        args_sha256="0" * 64,
        args_summary=summary,
        created_at=0,
        expires_at=3_600_000,
        link=f"{INBOX}#req-{i}",
        at=0,
    )


def test_people_get_one_message_from_three_requests_and_webhooks_one_each() -> None:
    deliveries = [planned(i, "chat", "slack") for i in range(3)]
    deliveries += [planned(10 + i, "hook", "webhook") for i in range(3)]
    deliveries += [planned(20 + i, "mail", "email") for i in range(2)]
    assert grouped(deliveries) == [
        ["ntf_10"],
        ["ntf_11"],
        ["ntf_12"],
        ["ntf_0", "ntf_1", "ntf_2"],
        ["ntf_20"],  # two are told one by one
        ["ntf_21"],
    ]


def test_a_message_is_one_channels_of_one_event() -> None:
    deliveries = [planned(i, "chat", "slack") for i in range(3)]
    deliveries += [planned(10 + i, "chat", "slack", "escalated") for i in range(3)]
    deliveries += [planned(20 + i, "other-chat", "slack") for i in range(3)]
    assert sorted(grouped(deliveries)) == [
        ["ntf_0", "ntf_1", "ntf_2"],
        ["ntf_10", "ntf_11", "ntf_12"],
        ["ntf_20", "ntf_21", "ntf_22"],
    ]


def test_the_headline_counts_the_requests_and_names_at_most_three_tools() -> None:
    tools = ["a", "b", "c", "d", "e"]
    digest = Digest(tuple(notice(i, tools[i % 5]) for i in range(12)), INBOX)
    assert digest.headline == "Approval needed: 12 requests (a, b, c and 2 more)"
    assert len(digest.lines()) == LISTED
    assert digest.footer(LISTED) == "2 more not listed. Every one is in the inbox"


def test_slack_digest_keeps_markup_in_arguments_inert_and_links_each_request() -> None:
    digest = Digest((notice(1, summary='{"to": "<@channel> & co"}'), notice(2), notice(3)), INBOX)
    message = json.loads(slack_digest(digest))
    text = json.dumps(message)
    assert "<@channel>" not in text and "&lt;@channel&gt; &amp; co" in text
    listed = message["blocks"][1]["text"]["text"]
    assert listed.count(f"<{INBOX}#req-") == 3
    assert (
        message["blocks"][2]["text"]["text"]
        == f"Every one is in the inbox: <{INBOX}|Open the inbox>"
    )


def test_a_long_summary_is_cut_in_a_digest_line() -> None:
    digest = Digest((notice(1, summary="x" * 500), notice(2), notice(3)), INBOX)
    first = digest.lines()[0][0]
    assert first.endswith("…") and len(first) < 200


def test_email_digest_escapes_every_value_in_its_html() -> None:
    digest = Digest((notice(1, summary="<script>alert(1)</script>"), notice(2), notice(3)), INBOX)
    message = email_digest(digest, sender="toolrouter@example.test", to=("a@example.test",))
    assert message["Subject"] == "[toolrouter] Approval needed: 3 requests (wire)"
    html = message.get_body(("html",))
    plain = message.get_body(("plain",))
    assert html is not None and plain is not None
    assert "<script>" not in html.get_content() and "&lt;script&gt;" in html.get_content()
    assert f"Every one is in the inbox: {INBOX}" in plain.get_content()


def test_a_slack_digest_lists_no_more_than_a_section_holds_and_counts_the_rest() -> None:
    """Markup escaped grows five times: ten lines of it would pass Slack's limit, and Slack
    would refuse the whole message (no approver told of any of these requests)."""
    notices = tuple(notice(i, tool="t" * 64, summary="&" * 300) for i in range(12))
    message = json.loads(slack_digest(Digest(notices, INBOX)))
    listed = message["blocks"][1]["text"]["text"]
    shown = listed.count(f"<{INBOX}#req-")
    assert 0 < shown < LISTED and len(listed) <= SLACK_SECTION_CHARS
    footer = message["blocks"][2]["text"]["text"]
    assert footer.startswith(f"{12 - shown} more not listed.")
    assert all(len(block["text"]["text"]) <= SLACK_SECTION_CHARS for block in message["blocks"])


def test_a_group_past_what_one_message_carries_goes_as_several() -> None:
    deliveries = [planned(i, "chat", "slack") for i in range(PER_MESSAGE + 5)]
    messages = grouped(deliveries)
    assert [len(ids) for ids in messages] == [PER_MESSAGE, 5]
    assert [i for ids in messages for i in ids] == [d.id for d in deliveries]
