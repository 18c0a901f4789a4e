"""Webhook signatures: HMAC-SHA256 over ``<unix seconds>.<body>``, sent as
``X-Toolrouter-Signature: t=<unix seconds>,v1=<hex>`` (Stripe's shape). The timestamp is
signed with the body, so a receiver can refuse an old message replayed at it."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Toolrouter-Signature"
# How old a signed message a receiver should still accept, by default.
TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return mac.hexdigest()


def header_value(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: str, header: str, body: bytes, *, now: int, tolerance_s: int = TOLERANCE_S
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``tolerance_s`` of ``now``
    (what a receiver does; the how-to shows the same in a few lines)."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance_s:
        return False
    return hmac.compare_digest(fields.get("v1", ""), signature(secret, timestamp, body))
