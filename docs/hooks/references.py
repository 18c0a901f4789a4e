"""MkDocs hook: references generated from the code at build time.

A page asks for a reference with a marker on a line of its own::

    <!-- reference: settings -->

optionally followed, after a blank line, by one line of note for readers of the Markdown
file itself (``> *Generated when …``), which the reference replaces too.

and the hook replaces it with Markdown rendered from the code: the settings model, the
tool-config models, the API's OpenAPI document, the CLI's own help and the status enums.
An unknown marker, and any field, operation or member the code has but the reference
cannot describe, fails the build; so the reference cannot drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from mkdocs.exceptions import PluginError
from refs_cli import cli_reference
from refs_config import settings_reference, tool_config_reference
from refs_http import http_reference
from refs_status import audit_events_reference, roles_reference, statuses_reference

RENDERERS: dict[str, Callable[[], str]] = {
    "settings": settings_reference,
    "tool-config": tool_config_reference,
    "http-api": http_reference,
    "cli": cli_reference,
    "call-statuses": statuses_reference,
    "audit-events": audit_events_reference,
    "roles": roles_reference,
}

# The marker, and the note after it for readers of the Markdown file (the site has the
# reference in its place).
MARKER = re.compile(
    r"^<!-- reference: ([a-z-]+) -->$(?:\n\n> \*Generated when[^\n]*$)?", re.MULTILINE
)


def render(markdown: str, *, page: str) -> str:
    """``markdown`` with each marker replaced by its reference."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise PluginError(f"{page}: unknown reference {name!r}; known: {sorted(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    return render(markdown, page=page.file.src_path)
