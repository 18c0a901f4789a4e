"""The entries of a batch body: read one at a time, checked in chunks bounded by size.

A large body's entries come as their JSON text (``Unread``), parsed only when their chunk
is checked and dropped once it is stored: JSON's smallest values cost some twenty-five
times their size as Python objects, so a body built whole could take gigabytes where a
chunk takes megabytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..chunking import ranges_within
from ..errors import BadRequest
from ..json_input import decode_json
from ..names import echo_name
from .checks import IDEMPOTENCY_KEY_MAX

CALL_FIELDS = frozenset({"tool", "args", "idempotency_key"})


@dataclass(frozen=True, slots=True)
class Malformed:
    """An entry known to be bad before it is parsed (an NDJSON line that is too long): it
    is rejected at its index, like any call."""

    error: str


@dataclass(frozen=True, slots=True)
class Unread:
    """One entry as its JSON text, within the size of a call."""

    text: bytes


def parse_call(item: object) -> tuple[object, object, str | None] | str:
    """``(tool, args, idempotency_key)`` of one batch entry, or why it is malformed."""
    if isinstance(item, Malformed):
        return item.error
    if isinstance(item, Unread):
        try:
            item = decode_json(item.text, what="call")
        except BadRequest as exc:
            return str(exc)
    if not isinstance(item, dict):
        return "malformed call: expected a JSON object"
    unknown = sorted(set(item) - CALL_FIELDS)
    if unknown:
        return f"unknown field: {echo_name(unknown[0])}"
    if "tool" not in item:
        return "missing field: tool"
    if not isinstance(item["tool"], str):
        return "tool must be a string"
    key = item.get("idempotency_key")
    if key is not None and not (
        isinstance(key, str) and 0 < len(key) <= IDEMPOTENCY_KEY_MAX and key.isprintable()
    ):
        return f"idempotency_key must be a string of 1-{IDEMPOTENCY_KEY_MAX} printable characters"
    return item["tool"], item.get("args", {}), key


def chunks(items: Sequence[object], most_calls: int, most_bytes: int) -> Iterator[range]:
    """The indexes of ``items`` in chunks of at most ``most_calls`` entries and, counting
    unread entries' text, ``most_bytes`` bytes (a larger entry is a chunk of its own)."""
    weights = [len(item.text) if isinstance(item, Unread) else 0 for item in items]
    return ranges_within(weights, most_calls, most_bytes)
