"""Small Markdown helpers shared by the reference renderers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from mkdocs.exceptions import PluginError

_RST_LITERAL = re.compile(r"``([^`]+)``")
_SPEC_REFERENCE = re.compile(r"\s*\(SPEC §[\d.]+\)")


def prose(text: str, *, where: str) -> str:
    """Docstring or comment text as Markdown: RST literals become code spans, and references
    to the design document (outside this repository) are dropped. A reference that cannot
    be dropped cleanly fails the build, so no page points outside the repository."""
    text = _RST_LITERAL.sub(r"`\1`", text)
    text = _SPEC_REFERENCE.sub("", text)
    if "SPEC" in text:
        raise PluginError(f"{where}: its text points to SPEC, outside the repository: {text!r}")
    return " ".join(text.split())


def paragraphs(text: str, *, where: str) -> str:
    """A docstring of several paragraphs, each made into Markdown prose."""
    blocks = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(prose(block, where=where) for block in blocks if block.strip())


def cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)
