"""Identifiers: random nonces, never derived from what they name."""

from __future__ import annotations

import os
import re
import secrets
import time

# What ``new_call_id`` makes; a string of any other shape names no call.
CALL_ID_RE = re.compile(r"call_[0-9a-f]{32}")


def is_call_id(text: object) -> bool:
    return isinstance(text, str) and CALL_ID_RE.fullmatch(text) is not None


def new_call_id() -> str:
    """``call_``, 48 bits of milliseconds since the epoch, then 80 random bits (32 hex).

    Call ids are the primary key of ``calls`` and are indexed in ``audit_log``. Fully
    random keys land all over those B-trees, and once the tables outgrow the page cache
    every insert reads pages back in, so inserts slow down as the tables grow. Ids that
    start with the time append at the right edge, at a steady rate. Nothing about the call
    is in it, and 80 random bits per millisecond keep it unguessable; only the owner's key
    can read a call anyway.
    """
    return f"call_{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def new_request_id() -> str:
    """``req-`` and 128 random bits: two identical calls get two requests."""
    return "req-" + secrets.token_hex(16)


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


def new_token() -> str:
    """A bearer key: 256 random bits, URL-safe."""
    return "trk_" + secrets.token_urlsafe(32)
