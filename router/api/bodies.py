"""Strict parsing of request bodies and parameters: every bad input becomes ``BadRequest``.

FastAPI's own body parsing lets a 10,000-deep nesting or an invalid UTF-8 byte escape as
a 500, and accepts ``NaN``; so bodies are parsed by hand (``json_input``), with clear
messages.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import BadRequest, NotFound
from ..ids import is_call_id
from ..json_input import parse_json
from ..names import echo_name
from ..settings import ESCAPED_BYTES, Settings

# Bodies of routes that take no calls: a decision's reason, an inbox form.
SMALL_BODY_BYTES = 64 * 1024


def decision_body_bytes(settings: Settings) -> int:
    """A decision's body: room for edited arguments as large as a call's."""
    return SMALL_BODY_BYTES + ESCAPED_BYTES * settings.max_args_bytes


def object_body(raw: bytes, *, limit: int, allowed: frozenset[str]) -> dict[str, Any]:
    return check_fields(parse_json(raw, limit=limit), allowed)


def check_fields(body: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("malformed body: expected a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise BadRequest(f"unknown field: {echo_name(unknown[0])}")
    return body


# Numbers in a query string as JSON writes them: ASCII digits, no spaces, no ``_`` (Python's
# ``int`` and ``float`` take all three, and digits of every script).
INTEGER = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|-?\.[0-9]+")


def wait_seconds(value: Any, *, maximum: float) -> float:
    """``wait_s`` from a JSON body: a finite number in [0, maximum] (a string is not one)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest("wait_s must be a number of seconds")
    try:
        seconds = float(value)
    except OverflowError:  # an integer of hundreds of digits
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0 or seconds > maximum:
        raise BadRequest(f"wait_s must be between 0 and {maximum:g}")
    return seconds


def wait_seconds_param(value: str | None, *, maximum: float) -> float:
    """``wait_s`` from a query string: a number as JSON writes it, in [0, maximum]."""
    if value is None:
        return 0.0
    if not DECIMAL.fullmatch(value):
        raise BadRequest("wait_s must be a number of seconds")
    return wait_seconds(float(value), maximum=maximum)


def int_param(value: str | None, name: str, *, default: int, low: int, high: int) -> int:
    """A query parameter that is a whole number from ``low`` to ``high``."""
    if value is None:
        return default
    try:
        if not INTEGER.fullmatch(value):
            raise ValueError(value)
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if not low <= number <= high:
        raise BadRequest(f"{name} must be between {low} and {high}")
    return number


def optional_string(body: dict[str, Any], field: str, *, max_len: int) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > max_len or not value.isprintable():
        raise BadRequest(f"{field} must be a string of 1-{max_len} printable characters")
    return value


def idempotency_key(body: dict[str, Any], headers: list[str]) -> str | None:
    """The request's idempotency key: the body's ``idempotency_key`` or the
    ``Idempotency-Key`` header; both, they must agree."""
    key = optional_string(body, "idempotency_key", max_len=256)
    if not headers:
        return key
    if len(headers) > 1:
        # A proxy reading the last one would name another call than the first names here.
        raise BadRequest("the Idempotency-Key header is given more than once")
    header = headers[0]
    try:
        # The server hands header bytes over as Latin-1; a key is text, sent as UTF-8, so
        # a header key and the same body key are one key (and one call).
        text = header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise BadRequest("the Idempotency-Key header must be UTF-8 text") from None
    header_key = optional_string({"Idempotency-Key": text}, "Idempotency-Key", max_len=256)
    if key is not None and key != header_key:
        raise BadRequest("idempotency_key and the Idempotency-Key header differ")
    return header_key


def check_call_id(call_id: str) -> str:
    """Anything that is not shaped like a call id names no call."""
    if not is_call_id(call_id):
        raise NotFound(f"unknown call: {echo_name(call_id)}")
    return call_id
