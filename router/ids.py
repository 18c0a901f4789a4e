"""Identifiers: random nonces, never derived from what they name."""

from __future__ import annotations

import secrets


def new_call_id() -> str:
    return "call_" + secrets.token_hex(16)


def new_request_id() -> str:
    """``req-`` and 128 random bits: two identical calls get two requests."""
    return "req-" + secrets.token_hex(16)


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


def new_token() -> str:
    """A bearer key: 256 random bits, URL-safe."""
    return "trk_" + secrets.token_urlsafe(32)
