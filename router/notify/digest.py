"""Many requests' event on a channel people read, told in one message.

An agent's batch of gated calls makes one request per call, announced together. A webhook,
read by a program, still gets one signed document per request; a Slack channel or a
mailbox, read by people, gets one message for the requests of one announcement once they
are ``DIGEST_FROM`` or more: how many, the first ``LISTED`` with their tool, requester and
arguments (and an edit's editor, an escalation's wait and group), and the link to the
inbox. Each request keeps its own delivery row, recorded with that message's outcome.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage

from ..tools.notify_config import ChannelType
from .content import (
    HEADLINES,
    Element,
    Notice,
    compose_email,
    link,
    on_lines,
    plain,
    rich_text,
    shortened,
    slack_escape,
    slack_message,
)
from .model import NotifyEvent

# Fewer requests than this in one announcement are told one message each.
DIGEST_FROM = 3
# Requests named in a digest; the rest are counted, and the inbox lists them all.
LISTED = 10
# A listed request's arguments, shorter than a single notice's: ten must fit one message.
LINE_SUMMARY_CHARS = 100
# Deliveries one message carries at most: a batch chunk's (``router.dispatch.batches``).
PER_MESSAGE = 1000
# Slack caps a block's text (a section's at this): lines past it are counted, not listed.
SLACK_SECTION_CHARS = 3000
# Channel types read by people; a webhook's receiver wants each request on its own.
FOR_PEOPLE = frozenset({ChannelType.SLACK, ChannelType.EMAIL})


@dataclass(frozen=True, slots=True)
class Planned:
    """A delivery as grouping needs it."""

    id: str
    channel: str
    channel_type: str
    event: str


def grouped(planned: Sequence[Planned]) -> list[list[str]]:
    """The messages to send for ``planned``: the ids of each, in order. On a channel for
    people, one message for all of one event once they are ``DIGEST_FROM`` or more."""
    groups: dict[tuple[str, str], list[str]] = {}
    alone: list[list[str]] = []
    for delivery in planned:
        if delivery.channel_type in FOR_PEOPLE:
            groups.setdefault((delivery.channel, delivery.event), []).append(delivery.id)
        else:
            alone.append([delivery.id])
    for ids in groups.values():
        if len(ids) < DIGEST_FROM:
            alone.extend([i] for i in ids)
        else:
            starts = range(0, len(ids), PER_MESSAGE)
            alone.extend(ids[start : start + PER_MESSAGE] for start in starts)
    return alone


@dataclass(frozen=True, slots=True)
class Digest:
    """One event of several requests, as Slack and email tell it."""

    notices: tuple[Notice, ...]
    # The inbox's list, where every request of the digest can be decided.
    inbox: str

    @property
    def event(self) -> NotifyEvent:
        return self.notices[0].event

    @property
    def headline(self) -> str:
        tools = sorted({notice.tool for notice in self.notices})
        named = ", ".join(tools[:3]) + (f" and {len(tools) - 3} more" if len(tools) > 3 else "")
        return f"{HEADLINES[self.event]}: {len(self.notices)} requests ({named})"

    def lines(self) -> list[tuple[str, str]]:
        """Each listed request: its text and its own link."""
        return [
            (
                f"{notice.tool} by {notice.requested_by}{_detail(notice)} "
                f"({notice.request_id}): {shortened(notice.args_summary, LINE_SUMMARY_CHARS)}",
                notice.link,
            )
            for notice in self.notices[:LISTED]
        ]

    def footer(self, listed: int) -> str:
        """The closing line, after ``listed`` requests were listed."""
        unlisted = len(self.notices) - listed
        more = f"{unlisted} more not listed. " if unlisted > 0 else ""
        return f"{more}Every one is in the inbox"


def _detail(notice: Notice) -> str:
    # Edits by different approvers may share a digest, and escalations of requests made at
    # different times or of tools with different groups: each line says its own.
    if notice.event is NotifyEvent.EDITED:
        return f", edited by {notice.edited_by}"
    if notice.event is NotifyEvent.ESCALATED:
        return f", waiting {notice.waiting_for}, escalated to {notice.escalated_to_text}"
    return ""


def slack_digest(digest: Digest) -> bytes:
    """One Slack message for the whole digest: a line per listed request, linked."""
    listed: list[list[Element]] = []
    chars = 0
    for text, url in digest.lines():
        chars += len(f"• {text}\n")
        if chars > SLACK_SECTION_CHARS:
            break
        listed.append([plain("• "), link(url, text)])
    footer = rich_text(
        plain(f"{digest.footer(len(listed))}: "), link(digest.inbox, "Open the inbox")
    )
    headline = rich_text(plain(digest.headline, bold=True))
    text = f"{slack_escape(digest.headline)} <{digest.inbox}|Open the inbox>"
    return slack_message(text, [headline, rich_text(*on_lines(listed)), footer])


def email_digest(digest: Digest, *, sender: str, to: tuple[str, ...]) -> EmailMessage:
    """One email for the whole digest: plain text, and HTML with every value escaped."""
    plain = [digest.headline, ""]
    plain += [f"- {text}\n  {link}" for text, link in digest.lines()]
    footer = digest.footer(len(digest.lines()))
    plain += ["", f"{footer}: {digest.inbox}", ""]
    items = "".join(
        f'<li><a href="{html.escape(link, quote=True)}">{html.escape(text)}</a></li>'
        for text, link in digest.lines()
    )
    inbox = html.escape(digest.inbox, quote=True)
    body = (
        f"<html><body><h2>{html.escape(digest.headline)}</h2><ul>{items}</ul>"
        f'<p>{html.escape(footer)}: <a href="{inbox}">Open the inbox</a></p>'
        "</body></html>"
    )
    return compose_email(
        digest.headline, sender=sender, to=to, plain="\n".join(plain), html_body=body
    )
