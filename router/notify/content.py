"""What a notification says, for each kind of channel: a signed JSON document, a Slack
message, an email in plain text and HTML. Every one carries a link to the request in the
inbox, never a link that decides: deciding takes an approver's session.

Arguments appear only as a short summary: values of ``${VAR}`` secrets replaced by their
names, values under secret-looking keys and secret-looking values (toolrouter keys, JWTs,
bearer tokens, private keys) masked, long strings and the whole cut short.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

from ..canonical import shown_plainly
from ..trust.redaction import Redactor
from .model import WAITING, NotifyEvent

SUMMARY_CHARS = 300
# The start of an escape (``\``, ``\u20``) that a cut would leave unfinished at the end.
_PARTIAL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*(\\(?:u[0-9a-fA-F]{0,3})?)$")
VALUE_CHARS = 60
# Keys whose values are masked: anywhere in the key, or (short ones, which other words
# hold) as a word of their own (``pin`` and ``user_pin``, not ``shipping``).
SECRET_KEY_RE = re.compile(
    r"pass|secret|token|api.?key|auth|credential|private|cookie|session|bearer|signature"
    r"|(?<![a-z])(?:pwd|pin|otp|cvv|cvc|jwt|sig|ssn)(?![a-z])",
    re.IGNORECASE,
)
# Values that are secrets whatever their key: a toolrouter key, a JWT, a bearer header's
# value, a PEM private key.
SECRET_VALUE_RE = re.compile(
    r"trk_[A-Za-z0-9_-]{8,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?s:.*)"  # to the end: its end may be cut off
)
MASK = "***"
# How much of a value the secret-looking patterns read: a value is shown cut to
# ``VALUE_CHARS``, and masks shorten what comes before the cut, never by this much.
SCANNED_CHARS = 4096
# A Block Kit element or block, as Slack's JSON has it.
Element = dict[str, Any]

HEADLINES = {
    NotifyEvent.PENDING: "Approval needed",
    NotifyEvent.ESCALATED: "Escalated, still waiting for a decision",
    NotifyEvent.EDITED: "Arguments edited, approve the new ones",
    NotifyEvent.APPROVED: "Approved",
    NotifyEvent.DENIED: "Denied",
    NotifyEvent.EXPIRED: "Expired without a decision",
    NotifyEvent.CANCELLED: "Cancelled by the requester",
}


@dataclass(frozen=True, slots=True)
class Notice:
    """One event of one request, as every channel tells it."""

    event: NotifyEvent
    request_id: str
    call_id: str
    tool: str
    requested_by: str
    approvers: tuple[str, ...]
    approvals_required: int
    args_sha256: str
    args_summary: str
    created_at: int
    expires_at: int
    link: str
    at: int
    # The group an ``escalated`` notice is sent to; empty for every other event.
    escalated_roles: tuple[str, ...] = ()
    escalated_keys: tuple[str, ...] = ()
    # The approver whose edit an ``edited`` notice tells; empty for every other event.
    edited_by: str = ""
    # The delivery it is: the same on each attempt, so that a receiver can drop a repeat.
    delivery_id: str = ""

    @property
    def expires_in_s(self) -> int:
        return max(0, (self.expires_at - self.at) // 1000)

    @property
    def headline(self) -> str:
        return f"{HEADLINES[self.event]}: {self.tool} ({self.request_id})"

    def facts(self) -> list[tuple[str, str]]:
        """The lines every human-readable form shows, in order."""
        facts = [
            ("Tool", self.tool),
            ("Requested by", self.requested_by),
            ("Arguments", self.args_summary),
            ("Approvers", f"{', '.join(self.approvers)} ({self.approvals_required} needed)"),
        ]
        if self.event is NotifyEvent.ESCALATED:
            facts.append(("Escalated to", self.escalated_to_text))
            facts.append(("Waiting for", self.waiting_for))
        if self.event is NotifyEvent.EDITED:
            # True whether or not anyone had approved: an edit is the editor's approval.
            facts.append(("Edited by", f"{self.edited_by} (counts as their approval)"))
            facts.append(("Approvals before the edit", "no longer count: other arguments"))
        if self.event in WAITING:
            facts.append(("Expires in", duration(self.expires_in_s)))
        return facts

    @property
    def waiting_for(self) -> str:
        """How long the request has waited, as of this notice."""
        return duration(max(0, self.at - self.created_at) // 1000)

    @property
    def escalated_to_text(self) -> str:
        parts = [f"role {role}" for role in self.escalated_roles]
        parts += [f"key {key}" for key in self.escalated_keys]
        return ", ".join(parts)


def duration(seconds: int) -> str:
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


def summarize(args: Any, redactor: Redactor) -> str:
    """A one-line, bounded, secret-free view of the arguments."""
    text = json.dumps(_masked(args, redactor), ensure_ascii=False, separators=(", ", ": "))
    return shortened(shown_plainly(redactor(text)), SUMMARY_CHARS)


def shortened(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, cut with an ellipsis; an escape the cut
    would split (``\\u202e``) goes whole, so a reader never sees ``\\u20``."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    while (partial := _PARTIAL_ESCAPE.search(head)) is not None:
        head = head[: partial.start(1)]
    return head + "…"


def _masked(value: Any, redactor: Redactor) -> Any:
    """``value`` with secret-named keys masked and long strings cut, each string's secrets
    replaced before its cut (after it, part of a secret would be left)."""
    if isinstance(value, dict):
        return {
            key: MASK if SECRET_KEY_RE.search(str(key)) else _masked(item, redactor)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_masked(item, redactor) for item in value]
    if isinstance(value, str):
        # Matched within a bounded prefix: the patterns' runs cost the square of a long
        # value's length, and no more than its start is shown.
        value = redactor(value)
        cut = len(value) > SCANNED_CHARS
        value = SECRET_VALUE_RE.sub(MASK, value[:SCANNED_CHARS])
        if cut or len(value) > VALUE_CHARS:
            return value[: VALUE_CHARS - 1] + "…"
        return value
    return value


def webhook_body(notice: Notice) -> bytes:
    """The JSON document a webhook receives (its bytes are what is signed)."""
    document: dict[str, Any] = {
        "type": f"approval.{notice.event}",
        "event": str(notice.event),
        "request_id": notice.request_id,
        "call_id": notice.call_id,
        "tool": notice.tool,
        "requested_by": notice.requested_by,
        "approvers": list(notice.approvers),
        "approvals_required": notice.approvals_required,
        "args_sha256": notice.args_sha256,
        "args_summary": notice.args_summary,
        "created_at": notice.created_at,
        "expires_at": notice.expires_at,
        "expires_in_s": notice.expires_in_s,
        "url": notice.link,
        "sent_at": notice.at,
        "delivery_id": notice.delivery_id,
    }
    if notice.event is NotifyEvent.EDITED:
        document["edited_by"] = notice.edited_by
    if notice.event is NotifyEvent.ESCALATED:
        document["escalated_to"] = {
            "roles": list(notice.escalated_roles),
            "keys": list(notice.escalated_keys),
        }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def slack_escape(text: str) -> str:
    # Slack's mrkdwn treats only these three as markup; escaping them keeps links and
    # mentions in arguments inert.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(notice: Notice) -> bytes:
    """A Slack incoming-webhook message: ``text`` for notifications, blocks to read."""
    facts = [[plain(f"{label}: ", bold=True), plain(value)] for label, value in notice.facts()]
    text = f"{slack_escape(notice.headline)} <{notice.link}|Open in the inbox>"
    headline = rich_text(plain(notice.headline, bold=True))
    return slack_message(
        text,
        [headline, rich_text(*on_lines(facts)), rich_text(link(notice.link, "Open in the inbox"))],
    )


def plain(text: str, *, bold: bool = False) -> Element:
    """Rich text shown as written: Slack parses no markup, mention or emoji code in it."""
    element: Element = {"type": "text", "text": text}
    if bold:
        element["style"] = {"bold": True}
    return element


def link(url: str, text: str) -> Element:
    # ``url`` before ``text``: a test receiver takes the first ``#req-`` as the request's.
    return {"type": "link", "url": url, "text": text}


def rich_text(*elements: Element) -> Element:
    """A block of rich text, its empty elements left out (they show nothing)."""
    shown = [element for element in elements if element.get("text") != ""]
    return {"type": "rich_text", "elements": [{"type": "rich_text_section", "elements": shown}]}


def on_lines(lines: list[list[Element]]) -> list[Element]:
    """Rich-text elements of ``lines``, one line each."""
    elements: list[Element] = []
    for line in lines:
        if elements:
            elements.append(plain("\n"))
        elements += line
    return elements


def slack_message(text: str, blocks: list[Element]) -> bytes:
    """A Slack message: ``text`` (mrkdwn, its values already escaped) for notifications,
    and ``blocks`` of rich text, where an agent's values cannot format themselves."""
    return json.dumps({"text": text, "blocks": blocks}, ensure_ascii=False).encode("utf-8")


def email_message(notice: Notice, *, sender: str, to: tuple[str, ...]) -> EmailMessage:
    """The email: plain text, and HTML with every value escaped."""
    plain = [notice.headline, ""]
    plain += [f"{label}: {value}" for label, value in notice.facts()]
    plain += ["", f"Open in the inbox: {notice.link}", ""]
    rows = "".join(
        f"<tr><th align='left'>{html.escape(label)}</th><td>{html.escape(value)}</td></tr>"
        for label, value in notice.facts()
    )
    link = html.escape(notice.link, quote=True)
    body = (
        f"<html><body><h2>{html.escape(notice.headline)}</h2><table>{rows}</table>"
        f'<p><a href="{link}">Open in the inbox</a></p></body></html>'
    )
    return compose_email(
        notice.headline, sender=sender, to=to, plain="\n".join(plain), html_body=body
    )


def compose_email(
    headline: str, *, sender: str, to: tuple[str, ...], plain: str, html_body: str
) -> EmailMessage:
    """An email of toolrouter's, in plain text and in HTML (its values already escaped)."""
    message = EmailMessage()
    message["Subject"] = f"[toolrouter] {headline}"
    message["From"] = sender
    message["To"] = ", ".join(to)
    message.set_content(plain)
    message.add_alternative(html_body, subtype="html")
    return message
