"""Digests: which deliveries share a message, and what a digest says on Slack and by email;
and that on Slack an agent's values are shown as written, never as markup."""

from __future__ import annotations

import dataclasses
import json

import pytest

from router.notify.content import Notice, slack_body
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

from ..support.slack_blocks import links, objects, parsed, shown

INBOX = "https://inbox.example.test/ui/"


def planned(i: int, channel: str, kind: str, event: str = "pending") -> Planned:
    return Planned(f"ntf_{i}", channel, kind, event)


def notice(
    i: int, tool: str = "wire", summary: str = '{"to": "bob"}', by: str = "agent-7"
) -> Notice:
    return Notice(
        event=NotifyEvent.PENDING,
        request_id=f"req-{i}",
        call_id=f"call_{i}",
        tool=tool,
        requested_by=by,
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
    assert not any("<@channel>" in text for text in parsed(message))
    listed = message["blocks"][1]
    assert shown(listed).splitlines() == [
        '• wire by agent-7 (req-1): {"to": "<@channel> & co"}',
        '• wire by agent-7 (req-2): {"to": "bob"}',
        '• wire by agent-7 (req-3): {"to": "bob"}',
    ]
    assert links(message) == {INBOX, *(f"{INBOX}#req-{i}" for i in (1, 2, 3))}
    assert shown(message["blocks"][2]) == "Every one is in the inbox: Open the inbox"
    assert message["text"] == f"Approval needed: 3 requests (wire) <{INBOX}|Open the inbox>"


def test_each_line_of_a_digest_of_edits_names_its_editor() -> None:
    edits = tuple(
        dataclasses.replace(notice(i), event=NotifyEvent.EDITED, edited_by=editor)
        for i, editor in enumerate(["lee", "kim", "lee"])
    )
    texts = [text for text, _ in Digest(edits, INBOX).lines()]
    assert [text.split(" (")[0] for text in texts] == [
        "wire by agent-7, edited by lee",
        "wire by agent-7, edited by kim",
        "wire by agent-7, edited by lee",
    ]
    assert all(", edited by" not in text for text, _ in Digest((notice(1),), INBOX).lines())


def test_each_line_of_a_digest_of_escalations_says_how_long_and_to_whom() -> None:
    """One escalation names its group and its wait in lines of their own; a digest's requests,
    made at different times, of tools with different groups, each name theirs on its line."""
    escalations = tuple(
        dataclasses.replace(
            notice(i),
            event=NotifyEvent.ESCALATED,
            at=at,
            escalated_roles=roles,
            escalated_keys=keys,
        )
        for i, (at, roles, keys) in enumerate(
            [
                (900_000, ("manager",), ()),
                (905_000, ("manager",), ("alice",)),
                (3_700_000, (), ("bo",)),
            ]
        )
    )
    texts = [text for text, _ in Digest(escalations, INBOX).lines()]
    assert [text.split(" (")[0] for text in texts] == [
        "wire by agent-7, waiting 15 min 0 s, escalated to role manager",
        "wire by agent-7, waiting 15 min 5 s, escalated to role manager, key alice",
        "wire by agent-7, waiting 1 h 1 min, escalated to key bo",
    ]
    assert all("waiting" not in text for text, _ in Digest((notice(1),), INBOX).lines())


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


def test_a_slack_digest_lists_no_more_than_a_block_holds_and_counts_the_rest() -> None:
    """Ten lines of the longest tool and key names would pass Slack's limit, and Slack
    would refuse the whole message (no approver told of any of these requests)."""
    notices = tuple(notice(i, "t" * 64, "x" * 300, by="k" * 128) for i in range(12))
    message = json.loads(slack_digest(Digest(notices, INBOX)))
    listed = shown(message["blocks"][1])
    count = listed.count("• ")
    assert 0 < count < LISTED and len(listed) <= SLACK_SECTION_CHARS
    assert shown(message["blocks"][2]).startswith(f"{12 - count} more not listed.")


MARKUP = "*bold* _it_ ~strike~ `code` :smile: <@channel> & <http://x|y>"


@pytest.mark.parametrize("kind", ["notice", "digest"])
def test_an_agents_markup_is_shown_as_written_and_never_parsed(kind: str) -> None:
    """Slack's mrkdwn cannot escape ``*``, ``_``, ``~`` or backticks: in it an agent could
    strike out or embolden parts of its own arguments in the approver's message."""
    summary = json.dumps({"memo": MARKUP})
    notices = (notice(1, summary=summary), notice(2), notice(3))
    body = slack_body(notices[0]) if kind == "notice" else slack_digest(Digest(notices, INBOX))
    message = json.loads(body)
    texts = [o for o in objects(message["blocks"]) if o.get("type") in ("text", "link")]
    assert any(summary in element["text"] for element in texts)
    assert not any("memo" in o["text"] for o in objects(message) if "style" in o)
    assert all(text.find(marker) < 0 for text in parsed(message) for marker in MARKUP.split())
    assert not any(o.get("type") in ("mrkdwn", "section") for o in objects(message))
    inbox = {f"{INBOX}#req-{i}" for i in (1, 2, 3)} | {INBOX}
    assert links(message) <= inbox and f"{INBOX}#req-1" in links(message)


def test_a_slack_notice_reads_as_its_facts_each_on_its_line_label_bold() -> None:
    message = json.loads(slack_body(notice(1, summary='{"to": "*bob*"}')))
    headline, facts, link = message["blocks"]
    assert shown(headline) == "Approval needed: wire (req-1)"
    assert headline["elements"][0]["elements"][0]["style"] == {"bold": True}
    assert shown(facts).splitlines() == [
        "Tool: wire",
        "Requested by: agent-7",
        'Arguments: {"to": "*bob*"}',
        "Approvers: approver (1 needed)",
        "Expires in: 1 h 0 min",
    ]
    bold = [e["text"] for e in facts["elements"][0]["elements"] if "style" in e]
    assert bold == ["Tool: ", "Requested by: ", "Arguments: ", "Approvers: ", "Expires in: "]
    assert link["elements"][0]["elements"] == [
        {"type": "link", "url": f"{INBOX}#req-1", "text": "Open in the inbox"}
    ]
    assert message["text"] == f"Approval needed: wire (req-1) <{INBOX}#req-1|Open in the inbox>"


def test_a_group_past_what_one_message_carries_goes_as_several() -> None:
    deliveries = [planned(i, "chat", "slack") for i in range(PER_MESSAGE + 5)]
    messages = grouped(deliveries)
    assert [len(ids) for ids in messages] == [PER_MESSAGE, 5]
    assert [i for ids in messages for i in ids] == [d.id for d in deliveries]


def test_an_edited_notice_says_the_edit_counts_and_earlier_approvals_do_not() -> None:
    edited = dataclasses.replace(notice(1), event=NotifyEvent.EDITED, edited_by="lee")
    facts = dict(edited.facts())
    assert edited.headline == "Arguments edited, approve the new ones: wire (req-1)"
    assert facts["Edited by"] == "lee (counts as their approval)"
    assert facts["Approvals before the edit"] == "no longer count: other arguments"
    assert "Edited by" not in dict(notice(2).facts())
