"""A ``{"calls": [...]}`` batch body of many entries, read one entry at a time.

``json.loads`` turns a body of millions of tiny values (``[[],[],…]``) into millions of
objects, gigabytes of them, in one call that holds the interpreter for seconds: every other
request of the process waits. Here each value is read within a window of the size of a
call, and each call kept as its text (``Unread``), parsed again when its chunk is checked:
one entry too many is a 413, the rest never read, and other requests run between entries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..dispatch.batch_entries import Unread
from ..errors import BadRequest, PayloadTooLarge
from ..json_input import malformed, no_constants, text_of
from ..names import echo_name
from .bodies import check_fields, object_body

SPACE = re.compile(r"[ \t\n\r]*")
# The decoder's scanner reads one value at an index (``raw_decode`` without its checks).
SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_constant=no_constants
).scan_once  # type: ignore[attr-defined]
# Where a value is first looked for: most calls are small; a window grows by this factor.
FIRST_WINDOW = 1024
GROWTH = 8
VALUE_STARTS = frozenset('[{"-0123456789tfn')
# A window's last characters may hold a value cut in two that still reads, or fails, as
# another: ``1.5`` as ``1`` (``1.``), ``true`` as an error (``tr``), ``\u00e9`` as an error;
# the longest is ``-Infinity``, an error of its own once whole.
EDGE = len("-Infinity")


def json_calls(
    raw: bytes, *, limit: int, allowed: frozenset[str], max_calls: int, entry_limit: int
) -> dict[str, Any]:
    """The body as ``object_body`` reads it, but a ``calls`` list of more than
    ``max_calls`` entries, or a value of more than ``entry_limit`` characters, is refused
    before it is built; the calls of a long list come as ``Unread``."""
    if values_at_most(raw) <= max_calls:  # fewer values than calls allowed: built at little cost
        return object_body(raw, limit=limit, allowed=allowed)
    return walk_calls(raw, allowed=allowed, max_calls=max_calls, entry_limit=entry_limit)


def values_at_most(raw: bytes) -> int:
    """How many values the body can hold: each but the first follows a ``,``, ``:``, ``[``
    or ``{`` (commas alone miss nesting: ``[[[…]]]`` is a value per two characters)."""
    return 1 + sum(raw.count(char) for char in (b",", b":", b"[", b"{"))


def walk_calls(
    raw: bytes, *, allowed: frozenset[str], max_calls: int, entry_limit: int
) -> dict[str, Any]:
    """``json_calls`` of a body whose size is checked already, read an entry at a time."""
    text = text_of(raw)
    try:
        return _Walk(text, max_calls, entry_limit, allowed).body()
    except RecursionError as exc:
        raise malformed(exc) from None
    except ValueError as exc:  # a JSONDecodeError placed in the whole text, NaN, long integers
        raise malformed(exc) from None


class _Walk:
    def __init__(self, text: str, max_calls: int, entry_limit: int, allowed: frozenset[str]):
        self.text, self.max_calls, self.entry_limit = text, max_calls, entry_limit
        self.allowed = allowed

    def body(self) -> dict[str, Any]:
        text = self.text
        if text.startswith("\ufeff"):  # as ``json.loads`` says it, not "Expecting value"
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        at = self.space(0)
        if not text.startswith("{", at):
            if text[at : at + 1] in VALUE_STARTS:
                raise BadRequest("malformed body: expected a JSON object")
            raise json.JSONDecodeError("Expecting value", text, at)
        body: dict[str, Any] = {}
        at = self.space(at + 1)
        if not text.startswith("}", at):
            while True:
                if not text.startswith('"', at):
                    raise json.JSONDecodeError(
                        "Expecting property name enclosed in double quotes", text, at
                    )
                name, at = SCAN(text, at)
                at = self.expect(at, ":")
                if name == "calls" and text.startswith("[", at):
                    body[name], at = self.calls(at + 1)
                else:
                    body[name], at = self.value(at, echo_name(name))
                at = self.space(at)
                if text.startswith("}", at):
                    break
                at = self.expect(at, ",")
        at = self.space(at + 1)
        if at != len(text):
            raise json.JSONDecodeError("Extra data", text, at)
        return check_fields(body, self.allowed)

    def calls(self, at: int) -> tuple[list[object], int]:
        items: list[object] = []
        at = self.space(at)
        if self.text.startswith("]", at):
            return items, at + 1
        while True:
            if len(items) == self.max_calls:  # one more entry: too many, however many follow
                raise PayloadTooLarge(f"too many calls: over the limit of {self.max_calls}")
            end = self.value(at, f"call {len(items)}")[1]
            items.append(Unread(self.text[at:end].encode("utf-8")))
            at = self.space(end)
            if self.text.startswith("]", at):
                return items, at + 1
            at = self.expect(at, ",")

    def value(self, at: int, what: str) -> tuple[Any, int]:
        """The value at ``at`` and where it ends, read in windows of growing size: a value
        longer than ``entry_limit`` is refused without being built."""
        window = FIRST_WINDOW
        while True:
            window = min(window, self.entry_limit + EDGE)
            piece = self.text[at : at + window]
            cut = at + window < len(self.text)
            error: json.JSONDecodeError | None = None
            try:
                found, end = SCAN(piece, 0)
            except StopIteration as stop:
                error = json.JSONDecodeError("Expecting value", piece, stop.value)
            except json.JSONDecodeError as exc:
                error = exc
            else:
                if end > self.entry_limit:
                    break
                if not cut or end <= window - EDGE:
                    return found, at + end
            if error is not None and not (cut and _maybe_cut_short(error, window)):
                raise json.JSONDecodeError(error.msg, self.text, at + error.pos)
            if window >= self.entry_limit + EDGE:
                break
            window *= GROWTH
        raise PayloadTooLarge(f"{what} is written in more than {self.entry_limit} characters")

    def expect(self, at: int, char: str) -> int:
        at = self.space(at)
        if not self.text.startswith(char, at):
            raise json.JSONDecodeError(f"Expecting {char!r} delimiter", self.text, at)
        return self.space(at + 1)

    def space(self, at: int) -> int:
        return SPACE.match(self.text, at).end()  # type: ignore[union-attr]


def _maybe_cut_short(error: json.JSONDecodeError, window: int) -> bool:
    """Whether the window's end could be the cause: an error near it (a literal, a number or
    an escape cut in two), or a string it cut before its closing quote."""
    return error.pos > window - EDGE or error.msg.startswith("Unterminated string")
