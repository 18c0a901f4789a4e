"""A ``{"calls": [...]}`` batch body of many entries, read one entry at a time.

``json.loads`` turns a body of millions of tiny values (``[[],[],…]``) into millions of
objects, gigabytes of them, in one call that holds the interpreter for seconds: every other
request of the process waits. Here each value is read within a window of the size of a
call, and each call kept as its text (``Unread``), parsed again when its chunk is checked:
one entry too many is a 413, the rest never read, and other requests run between entries.

It answers what ``json.loads`` and the field checks answer, but for three things: a body
that is not an object is refused as such without reading on (not with ``json``'s first
syntax error in it), an over-long value is a 413, and so is every ``calls`` list of a body
that names ``calls`` twice, where ``json.loads`` would keep only the last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..dispatch.batch_entries import Unread
from ..errors import BadRequest, PayloadTooLarge
from ..json_input import UTF8_BLOCK, check_utf8, malformed, malformed_at, no_constants
from ..names import echo_name
from .bodies import check_fields, object_body

SPACE = re.compile(rb"[ \t\n\r]*")
# The decoder's scanner reads one value at an index (``raw_decode`` without its checks).
SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_constant=no_constants
).scan_once  # type: ignore[attr-defined]
# Where a value is first looked for: most calls are small; a window grows by this factor.
FIRST_WINDOW = 1024
GROWTH = 8
VALUE_STARTS = frozenset(b'[{"-0123456789tfn')
# A window's last characters may hold a value cut in two that still reads, or fails, as
# another: ``1.5`` as ``1`` (``1.``), ``true`` as an error (``tr``), ``\u00e9`` as an error;
# the longest is ``-Infinity``, an error of its own once whole.
EDGE = len("-Infinity")
BOM = "\ufeff".encode()
# The bytes that continue a character in UTF-8: left out, bytes count characters.
CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


def json_calls(
    raw: bytes, *, limit: int, allowed: frozenset[str], max_calls: int, entry_limit: int
) -> dict[str, Any]:
    """The body as ``object_body`` reads it, but a ``calls`` list of more than
    ``max_calls`` entries, or a value of more than ``entry_limit`` bytes, is refused
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
    check_utf8(raw)
    try:
        return _Walk(raw, max_calls, entry_limit, allowed).body()
    except RecursionError as exc:
        raise malformed(exc) from None
    except ValueError as exc:  # NaN, long integers
        raise malformed(exc) from None


class _Walk:
    """The body's bytes, walked: each window is read as Latin-1, one character a byte, so
    places are byte offsets, the text is never held decoded (one character beyond ASCII
    would make it up to four bytes a character), and JSON's syntax, all ASCII, reads the
    same. A call's text is kept as its bytes; other values are decoded as UTF-8."""

    def __init__(self, raw: bytes, max_calls: int, entry_limit: int, allowed: frozenset[str]):
        self.raw, self.max_calls, self.entry_limit = raw, max_calls, entry_limit
        self.allowed = allowed

    def body(self) -> dict[str, Any]:
        raw = self.raw
        if raw.startswith(BOM):  # as ``json.loads`` says it, not "Expecting value"
            raise self.error("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0)
        at = self.space(0)
        if not raw.startswith(b"{", at):
            if raw[at : at + 1] and raw[at] in VALUE_STARTS:
                raise BadRequest("malformed body: expected a JSON object")
            raise self.error("Expecting value", at)
        body: dict[str, Any] = {}
        at = self.space(at + 1)
        if not raw.startswith(b"}", at):
            while True:
                if not raw.startswith(b'"', at):
                    raise self.error("Expecting property name enclosed in double quotes", at)
                name, at = self.decoded(at, "a field's name")
                at = self.expect(at, b":")
                if name == "calls" and raw.startswith(b"[", at):
                    body[name], at = self.calls(at + 1)
                else:
                    body[name], at = self.decoded(at, echo_name(name))
                at = self.space(at)
                if raw.startswith(b"}", at):
                    break
                at = self.expect(at, b",")
        at = self.space(at + 1)
        if at != len(raw):
            raise self.error("Extra data", at)
        return check_fields(body, self.allowed)

    def calls(self, at: int) -> tuple[list[object], int]:
        items: list[object] = []
        at = self.space(at)
        if self.raw.startswith(b"]", at):
            return items, at + 1
        while True:
            if len(items) == self.max_calls:  # one more entry: too many, however many follow
                raise PayloadTooLarge(f"too many calls: over the limit of {self.max_calls}")
            end = self.end_of_value(at, f"call {len(items)}")
            items.append(Unread(self.raw[at:end]))
            at = self.space(end)
            if self.raw.startswith(b"]", at):
                return items, at + 1
            at = self.expect(at, b",")

    def decoded(self, at: int, what: str) -> tuple[Any, int]:
        """The value at ``at``, read as UTF-8, and where it ends."""
        end = self.end_of_value(at, what)
        return SCAN(self.raw[at:end].decode("utf-8"), 0)[0], end

    def end_of_value(self, at: int, what: str) -> int:
        """Where the value at ``at`` ends, read in windows of growing size: a value longer
        than ``entry_limit`` bytes is refused without being built."""
        window = FIRST_WINDOW
        while True:
            window = min(window, self.entry_limit + EDGE)
            piece = self.raw[at : at + window].decode("latin-1")
            cut = at + window < len(self.raw)
            error: json.JSONDecodeError | None = None
            try:
                end = SCAN(piece, 0)[1]
            except StopIteration as stop:
                error = json.JSONDecodeError("Expecting value", piece, stop.value)
            except json.JSONDecodeError as exc:
                error = exc
            except ValueError:
                # An integer past Python's digit limit, which may be a long float cut short.
                if not cut:
                    raise
            else:
                if end > self.entry_limit:
                    break
                if not cut or end <= window - EDGE:
                    return at + end
            if error is not None and not (cut and _maybe_cut_short(error, window)):
                raise self.error(error.msg, at + error.pos)
            if window >= self.entry_limit + EDGE:
                break
            window *= GROWTH
        raise PayloadTooLarge(f"{what} is written in more than {self.entry_limit} bytes")

    def expect(self, at: int, char: bytes) -> int:
        at = self.space(at)
        if not self.raw.startswith(char, at):
            raise self.error(f"Expecting {char.decode()!r} delimiter", at)
        return self.space(at + 1)

    def space(self, at: int) -> int:
        return SPACE.match(self.raw, at).end()  # type: ignore[union-attr]

    def error(self, message: str, at: int) -> BadRequest:
        """``json``'s error at byte ``at``, placed by line and character as it places it."""
        line_start = self.raw.rfind(b"\n", 0, at) + 1
        # A block at a time: a body is often one line, and its copy would double it.
        column = 1 + sum(
            len(self.raw[start : min(start + UTF8_BLOCK, at)].translate(None, CONTINUATION_BYTES))
            for start in range(line_start, at, UTF8_BLOCK)
        )
        return malformed_at(message, self.raw.count(b"\n", 0, at) + 1, column)


def _maybe_cut_short(error: json.JSONDecodeError, window: int) -> bool:
    """Whether the window's end could be the cause: an error near it (a literal, a number or
    an escape cut in two), or a string it cut before its closing quote."""
    return error.pos > window - EDGE or error.msg.startswith("Unterminated string")
