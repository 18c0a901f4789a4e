"""The deployment row: which secret key this database belongs to, and where its keyed audit
chain begins.

Written once, by the first process that holds a key (under the audit chain's lock, so the
boundary is exact), and sealed with that key. Every later process checks that its key is
the same one, so a process started with another key refuses to start rather than seal
work that the others cannot verify.

Rows before the boundary are chained without the key, so the row must never be written
again once the chain has grown: a row re-created at today's head would let anyone who can
write the database re-chain the whole log without the key. Where the deployment's signed
head (kept beside the key, away from the database) shows a keyed process has run, a
missing row is refused as tampering.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ..canonical import canonical_json
from ..clock import Clock
from ..db.schema import deployment
from ..db.store import Store
from ..errors import ConfigError
from ..trust.keyring import KeyRing, Purpose
from . import log as audit
from .head import SignedHead

ROW_ID = 1

MISSING = (
    "this database's audit log has rows but its deployment row (where the keyed chain "
    "begins) is missing, though this deployment's signed head shows it had one: the audit "
    "log may have been tampered with; run `toolrouter audit verify` and restore the "
    "database from a backup"
)
FORGED = (
    "this database's deployment row (where the keyed chain begins) is not signed with this "
    "deployment's key: the audit log may have been tampered with; run `toolrouter audit "
    "verify` and restore the database from a backup"
)


@dataclass(frozen=True, slots=True)
class Deployment:
    key_fingerprint: str
    # Audit rows up to this seq were chained before the key existed (plain SHA-256).
    keyed_from_seq: int
    created_at: int
    mac: str

    def sealed_text(self) -> str:
        return canonical_json(
            {
                "key_fingerprint": self.key_fingerprint,
                "keyed_from_seq": self.keyed_from_seq,
                "created_at": self.created_at,
            }
        )

    def verifies(self, keyring: KeyRing) -> bool:
        return keyring.verify(Purpose.AUDIT_HEAD, self.sealed_text(), self.mac)


def read(store: Store) -> Deployment | None:
    with store.reading() as conn:
        row = conn.execute(select(deployment).where(deployment.c.id == ROW_ID)).first()
    if row is None:
        return None
    data = dict(row._mapping)
    data.pop("id")
    return Deployment(**data)


def register(
    store: Store, keyring: KeyRing, clock: Clock, *, head: SignedHead | None = None
) -> Deployment:
    """This database's deployment row, written now if it has none; ``ConfigError`` when
    ``keyring`` is not the key the database was set up with, when the row is not sealed
    with it, or when it is missing from a chain that ``head`` (the deployment's signed
    head, if any) shows was keyed."""
    found = read(store)
    if found is None:
        try:
            with store.transaction() as conn:
                audit.lock_chain(conn)
                head_seq, _ = audit.chain_head(conn)
                if head_seq != 0 and head is not None and head.verifies(keyring):
                    raise ConfigError(MISSING)
                draft = Deployment(keyring.fingerprint, head_seq, clock(), "")
                sealed = Deployment(
                    draft.key_fingerprint,
                    draft.keyed_from_seq,
                    draft.created_at,
                    keyring.sign(Purpose.AUDIT_HEAD, draft.sealed_text()),
                )
                conn.execute(
                    deployment.insert(),
                    [{"id": ROW_ID, **asdict(sealed)}],
                )
        except IntegrityError:
            pass  # another process registered it first; read theirs
        found = read(store)
        assert found is not None
    check_key(found, keyring)
    if not found.verifies(keyring):
        raise ConfigError(FORGED)
    return found


def check_key(found: Deployment, keyring: KeyRing) -> None:
    """``ConfigError`` when ``keyring`` is not the key ``found`` names."""
    if found.key_fingerprint != keyring.fingerprint:
        raise ConfigError(
            f"the secret key from {keyring.source or 'the settings'} (fingerprint "
            f"{keyring.fingerprint[:12]}) is not the key this database was set up with "
            f"(fingerprint {found.key_fingerprint[:12]}): give this deployment's key in "
            "TOOLROUTER_SECRET_KEY or its key file"
        )
