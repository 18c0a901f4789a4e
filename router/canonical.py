"""Canonical JSON: one byte string per value, so hashes and comparisons are stable."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, ASCII only (lone surrogates and NULs stay escaped, so
    every database stores it), no NaN; raises ``ValueError``/``TypeError`` if not JSON."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def ascii_json(value: Any) -> bytes:
    """Compact JSON with non-ASCII escaped and no NaN, as every answer is written: a lone
    surrogate a client sent comes back as ``\\ud800`` instead of failing to encode. Not
    canonical (keys keep their order), but here for the same reason: one JSON writer for
    every layer that answers (the API, MCP, the inbox)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode(
        "ascii"
    )


def shown_plainly(json_text: str) -> str:
    """JSON text for people to read, with each character that prints as nothing or moves
    the text around it (bidirectional controls, zero-width and other format characters)
    written as its ``\\u`` escape, which parses back to the same value: an argument
    cannot display as something other than what it holds. Line breaks between values stay
    (inside strings JSON escapes them already)."""
    if json_text.isprintable():
        return json_text
    return "".join(c if c.isprintable() or c == "\n" else json.dumps(c)[1:-1] for c in json_text)


def shown_as_text(text: str) -> str:
    """``text`` for a terminal or a log line: each character that is not printable (control
    codes such as ESC, CR, LF, backspace and NUL; bidirectional, zero-width and other
    format characters) written as its Python escape (``\\x1b``, ``\\u202e``), so what
    someone else wrote can neither move the cursor, retitle the terminal, start a line of
    its own nor hide, and the reader still sees that something odd is there."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def storable_text(text: str) -> str:
    """``text`` as every database stores it: NULs and lone surrogates (which PostgreSQL and
    SQLite's UTF-8 refuse) written out as their escapes, everything else unchanged."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# What ``sha256_hex`` writes: a client's copy of a digest is checked against it.
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def args_digest(args: Any) -> str:
    """SHA-256 of the canonical JSON of a call's arguments."""
    return sha256_hex(canonical_json(args))


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep (a scalar
    is 0 levels, ``[]`` is 1). Walked without recursion, so any depth can be asked about."""
    if not isinstance(value, dict | list | tuple):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list | tuple):
                stack.append((child, depth + 1))
    return False


def too_deep_message(what: str, limit: int) -> str:
    return f"{what} nested deeper than the limit of {limit} levels"


def load_for_display(text: str) -> Any:
    """Stored JSON for people to read; what cannot be read back (nested past Python's
    recursion limit, in a row the nesting limit did not check) is named instead of
    raising."""
    try:
        return json.loads(text)
    except RecursionError:
        return {"unreadable": "nested too deeply to show"}
