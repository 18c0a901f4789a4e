"""JSON from clients, parsed strictly: every bad input becomes ``BadRequest`` with a clear
message, never a 500 (a 10,000-deep nesting, an invalid UTF-8 byte) and never ``NaN``."""

from __future__ import annotations

import codecs
import json
import re
import sys
from typing import Any

from .errors import BadRequest, PayloadTooLarge

# Bodies are checked for UTF-8 in blocks of this size, never held decoded whole.
UTF8_BLOCK = 1 << 20
# What ``bytes.strip`` strips.
BLANK = re.compile(rb"[ \t\n\r\x0b\x0c]*")


def no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def finite(text: str) -> float:
    """A JSON number as a float; ``ValueError`` for one past a float's range (``1e400``),
    which would go out again as ``Infinity``, not JSON."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of a JSON number's range")
    return value


def too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"body is {size} bytes, over the limit of {limit}")


def past_limit(limit: int) -> PayloadTooLarge:
    """``too_large`` of a body refused as it streams in, before its size is known."""
    return PayloadTooLarge(f"body is over the limit of {limit} bytes")


def parse_json(raw: bytes, *, limit: int) -> Any:
    """Decode a JSON body, refusing what JSON does not allow and what would hurt."""
    if len(raw) > limit:
        raise too_large(len(raw), limit)
    return decode_json(raw)


def decode_json(raw: bytes, *, what: str = "body") -> Any:
    """``parse_json`` of a text whose size is checked already; ``what`` names it in the
    refusal (a batch's line is a ``call``, not the body)."""
    try:
        return json.loads(text_of(raw, what=what), parse_constant=no_constants)
    except (RecursionError, ValueError) as exc:
        raise malformed(exc, what=what) from None


def text_of(raw: bytes, *, what: str = "body") -> str:
    """The body as text: refused when empty or not UTF-8."""
    refuse_empty(raw, what=what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc.start, what=what) from None


def check_utf8(raw: bytes) -> None:
    """``text_of``'s refusals, without holding the text: checked a block at a time."""
    refuse_empty(raw)
    decoder = codecs.getincrementaldecoder("utf-8")()
    for start in range(0, len(raw), UTF8_BLOCK):
        try:
            decoder.decode(raw[start : start + UTF8_BLOCK], final=start + UTF8_BLOCK >= len(raw))
        except UnicodeDecodeError as exc:
            # The decoder keeps a character cut at a block's end for the next block.
            raise not_utf8(start - len(decoder.getstate()[0]) + exc.start) from None


def refuse_empty(raw: bytes, *, what: str = "body") -> None:
    if BLANK.fullmatch(raw):  # ``raw.strip()`` would copy the body
        raise BadRequest(f"malformed {what}: empty; expected a JSON object")


def not_utf8(byte: int, *, what: str = "body") -> BadRequest:
    return BadRequest(f"malformed {what}: not valid UTF-8 (byte {byte})")


def malformed_at(message: str, line: int, column: int, *, what: str = "body") -> BadRequest:
    """``json``'s error where it found it (counted in characters, from 1)."""
    return BadRequest(f"malformed {what}: {located(message, line, column)}")


def located(message: str, line: int, column: int) -> str:
    """``json``'s message and where, in our words where Python's advise its programmer."""
    if message.startswith("Unexpected UTF-8 BOM"):
        return "starts with a byte order mark (U+FEFF), which JSON sent must not hold"
    # Some of ``json``'s messages end in "at" already ("Invalid control character at").
    return f"{message.removesuffix(' at')} at line {line} column {column}"


def malformed(exc: RecursionError | ValueError, *, what: str = "body") -> BadRequest:
    """The message for what ``json`` raised on a body (``JSONDecodeError`` is a
    ``ValueError``; so are ``NaN`` and an integer of too many digits)."""
    if isinstance(exc, RecursionError):
        return BadRequest(f"malformed {what}: nested too deeply")
    return BadRequest(f"malformed {what}: {json_problem(exc)}")


def json_problem(exc: ValueError) -> str:
    """What is wrong with a JSON text, from what ``json`` raised on it."""
    if isinstance(exc, json.JSONDecodeError):
        return located(exc.msg, exc.lineno, exc.colno)
    if "integer string conversion" in str(exc):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return str(exc)
