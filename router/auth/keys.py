"""API keys: random bearer tokens stored only as SHA-256 hashes, each with roles (SPEC §9).

Each row is sealed with the secret key (name, token hash, roles, revocation): a row written
into the database without it, or one whose roles or revocation were changed there, is no
key, wherever a key is looked up.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .. import metrics
from ..clock import Clock, wall_clock_ms
from ..db.schema import api_keys, ui_sessions
from ..db.store import Store
from ..errors import Conflict, NotAuthenticated, NotFound
from ..ids import new_token
from ..names import (
    KEY_NAME_RULE,
    LOOK_ALIKE_RULE,
    ONE_WAY_RULE,
    ROLE_NAME_RULE,
    is_key_name,
    is_role_name,
    is_written_one_way,
    mixes_look_alike_letters,
)
from ..trust.keyring import KeyRing
from ..trust.row_seals import key_row_seal
from .key_cache import Acknowledged, PrincipalCache
from .principal import Principal

log = logging.getLogger(__name__)

# Every request runs this; built once (see ``router.db.store``).
_BY_HASH = select(api_keys).where(api_keys.c.token_hash == bindparam("digest"))


_BY_NAME = select(api_keys).where(api_keys.c.name == bindparam("name"))


def principal_named(conn: Connection, name: str, keyring: KeyRing) -> Principal | None:
    """The key called ``name`` with its current roles, read from the database now; None when
    there is no such key, it is revoked, or its row is not sealed. Who decides is always
    settled this way, never from what a message says about them."""
    row = conn.execute(_BY_NAME, {"name": name}).first()
    if row is None or row.revoked_at is not None or not sealed(keyring, row):
        return None
    return Principal(name=row.name, roles=frozenset(json.loads(row.roles)))


def sealed(keyring: KeyRing, row: Any) -> bool:
    """Whether ``row`` of ``api_keys`` is as toolrouter wrote it; reported when it is not."""
    if verifies(keyring, row):
        return True
    _report_unsealed(row.name, row.seal)
    return False


def verifies(keyring: KeyRing, row: Any) -> bool:
    seal = key_row_seal(keyring, row._mapping)
    return row.seal is not None and hmac.compare_digest(seal, row.seal)


@functools.lru_cache(maxsize=1024)
def _report_unsealed(name: str, seal: str | None) -> None:
    """Once per row as found, not at every lookup of it."""
    log.warning("api key %r is not sealed with this deployment's key: refused", name)
    metrics.tampered(metrics.Tampered.API_KEY)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class KeyStore:
    """Create, revoke and check keys.

    ``announce`` is called after a revocation commits (``Runtime`` publishes it on Redis,
    for the API processes' key caches). ``cache``, set by an API process, keeps the
    principals of recently used keys (see ``router.auth.key_cache``).
    """

    def __init__(
        self,
        store: Store,
        keyring: KeyRing,
        clock: Clock = wall_clock_ms,
        *,
        announce: Callable[[], Acknowledged] | None = None,
        cache: PrincipalCache | None = None,
    ) -> None:
        self.store, self.keyring, self.clock = store, keyring, clock
        self.announce, self.cache = announce, cache

    def create(self, name: str, roles: list[str]) -> str:
        """Store a new key and return its token: the only time the token is ever seen."""
        if not is_key_name(name):
            raise ValueError(KEY_NAME_RULE)
        if mixes_look_alike_letters(name):
            raise ValueError(f"key name {LOOK_ALIKE_RULE}: {json.dumps(name)}")
        if not is_written_one_way(name):
            raise ValueError(f"key name {ONE_WAY_RULE}: {json.dumps(name)}")
        if not roles:
            raise ValueError("a key needs at least one role")
        odd = next((role for role in roles if not is_role_name(role)), None)
        if odd is not None:
            raise ValueError(f"{ROLE_NAME_RULE}: {json.dumps(odd)}")
        # Only exact names grant anything: "admin" with a Cyrillic \u0430 would grant nothing.
        alike = next((role for role in roles if mixes_look_alike_letters(role)), None)
        if alike is not None:
            raise ValueError(f"role {LOOK_ALIKE_RULE}: {json.dumps(alike)}")
        twin = next((role for role in roles if not is_written_one_way(role)), None)
        if twin is not None:
            raise ValueError(f"role {ONE_WAY_RULE}: {json.dumps(twin)}")
        token = new_token()
        row: dict[str, Any] = {
            "name": name,
            "token_hash": token_hash(token),
            "roles": json.dumps(sorted(set(roles))),
            "created_at": self.clock(),
            "revoked_at": None,
        }
        row["seal"] = key_row_seal(self.keyring, row)
        try:
            with self.store.transaction() as conn:
                conn.execute(api_keys.insert(), [row])
        except IntegrityError:
            raise Conflict(f"a key named {name!r} already exists") from None
        return token

    def revoke(self, name: str) -> Acknowledged | None:
        """Revoke the key and end its inbox sessions; how the API processes heard it (None
        where nothing announces revocations)."""
        now = self.clock()
        with self.store.transaction() as conn:
            row = conn.execute(_BY_NAME, {"name": name}).first()
            if row is not None:
                sealed(self.keyring, row)  # a forged row, revoked, is reported first
            revoked = {**row._mapping, "revoked_at": now} if row is not None else None
            result = conn.execute(
                update(api_keys)
                .where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
                .values(
                    revoked_at=now,
                    # Sealed revoked: setting revoked_at back to NULL unseals the row.
                    seal=key_row_seal(self.keyring, revoked) if revoked is not None else None,
                )
            )
            conn.execute(
                update(ui_sessions)
                .where(ui_sessions.c.key_name == name, ui_sessions.c.ended_at.is_(None))
                .values(ended_at=now)
            )
        if result.rowcount != 1:
            if row is not None:
                raise Conflict(f"key already revoked: {name}")
            raise NotFound(f"unknown key: {name}")
        return self.announce() if self.announce is not None else None

    def list(self) -> list[dict[str, object]]:
        with self.store.reading() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.name)).all()
        return [
            {
                "name": r.name,
                "roles": json.loads(r.roles),
                "created_at": r.created_at,
                "revoked": r.revoked_at is not None,
                # Refused wherever it is used: written or changed outside toolrouter.
                "sealed": verifies(self.keyring, r),
            }
            for r in rows
        ]

    def cached(self, token: str | None) -> Principal | None:
        """The principal behind ``token`` if the cache knows it: no database, no thread."""
        if self.cache is None or not token:
            return None
        return self.cache.get(token_hash(token))

    def authenticate(self, token: str | None) -> Principal:
        """The principal behind ``token``; ``NotAuthenticated`` if missing, unknown or revoked."""
        if not token:
            raise NotAuthenticated("missing bearer key")
        digest = token_hash(token)
        cache = self.cache
        if cache is not None:
            known = cache.get(digest)
            if known is not None:
                return known
            generation = cache.generation  # read before the row: see router.auth.key_cache
        with self.store.reading() as conn:
            row = conn.execute(_BY_HASH, {"digest": digest}).first()
        # The lookup is by hash, so timing reveals nothing about the token; compare anyway.
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            raise NotAuthenticated("invalid key")
        if row.revoked_at is not None:
            raise NotAuthenticated("key revoked")
        if not sealed(self.keyring, row):
            raise NotAuthenticated("invalid key")
        who = Principal(name=row.name, roles=frozenset(json.loads(row.roles)))
        if cache is not None:
            cache.put(digest, who, generation=generation)
        return who
