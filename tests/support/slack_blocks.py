"""A Slack message as the notification tests read it: the text of a rich-text block, the
text Slack parses as mrkdwn, and where the message's links lead."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

# A link in mrkdwn: ``<url|text>`` or ``<url>``.
_MRKDWN_LINK = re.compile(r"<(https?://[^|>]+)[|>]")


def shown(block: dict[str, Any]) -> str:
    """A rich-text block's text as it reads, links by their text."""
    assert block["type"] == "rich_text", block
    return "".join(
        element["text"]
        for section in block["elements"]
        for element in section["elements"]
        if element["type"] in ("text", "link")
    )


def objects(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``value``, nested ones included."""
    if isinstance(value, dict):
        yield value
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from objects(item)


def parsed(message: dict[str, Any]) -> list[str]:
    """The text Slack parses as mrkdwn: the notification ``text`` and any mrkdwn object."""
    found = [o["text"] for o in objects(message["blocks"]) if o.get("type") == "mrkdwn"]
    return [message["text"], *found]


def links(message: dict[str, Any]) -> set[str]:
    """Where the message's links lead: its link elements, and links in text Slack parses."""
    urls = {o["url"] for o in objects(message) if "url" in o}
    return urls | {url for text in parsed(message) for url in _MRKDWN_LINK.findall(text)}
