"""Seals of the rows that say who someone is: API keys and inbox sessions.

Keys, their roles and sessions live in the database, and every request is authorised from
them; a seal made with the secret key makes a row written, or changed, without it no key
and no session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..canonical import canonical_json
from .keyring import KeyRing, Purpose


def key_row_seal(keyring: KeyRing, row: Mapping[str, Any]) -> str:
    """An ``api_keys`` row's seal: its name, token hash, roles and revocation."""
    fields = [row["name"], row["token_hash"], row["roles"], row["revoked_at"]]
    return keyring.sign(Purpose.KEY_ROW, canonical_json(["api_key", *fields]))


def session_row_seal(keyring: KeyRing, id_hash: str, key_name: str, expires_ms: int) -> str:
    """A ``ui_sessions`` row's seal: the hash of its id, the key it signs in as, and its
    expiry (its end, set later, is not sealed: reviving an ended session needs its cookie,
    and the key is checked at every request anyway)."""
    fields = ["ui_session", id_hash, key_name, expires_ms]
    return keyring.sign(Purpose.KEY_ROW, canonical_json(fields))
