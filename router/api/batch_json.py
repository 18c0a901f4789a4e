"""A ``{"calls": [...]}`` batch body, its calls counted as they are parsed.

``json.loads`` would turn a body of millions of tiny entries (``[[],[],…]``) into millions
of objects, gigabytes of them, in one call that holds the interpreter for seconds: every
other request of the process waits. Here the ``calls`` list is read one entry at a time,
so one entry too many is a 413, the rest never read, and other requests run between entries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import PayloadTooLarge
from .bodies import check_fields, no_constants, object_body

SPACE = re.compile(r"[ \t\n\r]*")
# The decoder's scanner reads one value at an index (``raw_decode`` without its checks).
SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_constant=no_constants
).scan_once  # type: ignore[attr-defined]


class _Unexpected(Exception):
    """Not the simple shape the walk reads: ``json.loads`` says what is wrong."""


def json_calls(raw: bytes, *, limit: int, allowed: frozenset[str], max_calls: int) -> Any:
    """The body as ``object_body`` reads it; a ``calls`` list of more than ``max_calls``
    entries is refused before it is built."""
    if raw.count(b",") < max_calls:  # fewer commas than the limit: cannot hold too many
        return object_body(raw, limit=limit, allowed=allowed)
    try:
        body = _walk(raw.decode("utf-8"), max_calls)
    except (_Unexpected, UnicodeDecodeError, StopIteration, RecursionError, ValueError):
        return object_body(raw, limit=limit, allowed=allowed)  # for its exact message
    return check_fields(body, allowed)


def _walk(text: str, max_calls: int) -> dict[str, Any]:
    body: dict[str, Any] = {}
    at = _expect(text, SPACE.match(text, 0).end(), "{")  # type: ignore[union-attr]
    if text.startswith("}", at):
        return _end(text, at + 1, body)
    while True:
        if not text.startswith('"', at):
            raise _Unexpected
        name, at = SCAN(text, at)
        at = _expect(text, at, ":")
        if name == "calls" and text.startswith("[", at):
            body[name], at = _calls(text, at + 1, max_calls)
        else:
            body[name], at = SCAN(text, at)
        at = SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text.startswith("}", at):
            return _end(text, at + 1, body)
        at = _expect(text, at, ",")


def _calls(text: str, at: int, max_calls: int) -> tuple[list[object], int]:
    items: list[object] = []
    at = SPACE.match(text, at).end()  # type: ignore[union-attr]
    if text.startswith("]", at):
        return items, at + 1
    while True:
        if len(items) == max_calls:  # one more entry: too many, however many follow
            raise PayloadTooLarge(f"too many calls: over the limit of {max_calls}")
        item, at = SCAN(text, at)
        items.append(item)
        at = SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text.startswith("]", at):
            return items, at + 1
        at = _expect(text, at, ",")


def _expect(text: str, at: int, char: str) -> int:
    at = SPACE.match(text, at).end()  # type: ignore[union-attr]
    if not text.startswith(char, at):
        raise _Unexpected
    return SPACE.match(text, at + 1).end()  # type: ignore[union-attr]


def _end(text: str, at: int, body: dict[str, Any]) -> dict[str, Any]:
    if SPACE.match(text, at).end() != len(text):  # type: ignore[union-attr]
        raise _Unexpected
    return body
