"""Canonical JSON: one byte string per value, so hashes and comparisons are stable."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, ASCII only (lone surrogates and NULs stay escaped, so
    every database stores it), no NaN; raises ``ValueError``/``TypeError`` if not JSON."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def args_digest(args: Any) -> str:
    """SHA-256 of the canonical JSON of a call's arguments."""
    return sha256_hex(canonical_json(args))
