"""The deployment row: which secret key this database belongs to, and where its keyed audit
chain begins.

Written once and sealed with the key: by the first process that starts on a database whose
audit log is empty, or, for a log written before the deployment had a key, by `toolrouter
audit adopt-key`, which the operator runs once. Every later process checks that its key is
the same one, so a process started with another key refuses to start rather than seal
work that the others cannot verify.

Rows before the boundary are chained without the key, so no process writes the row over a
log that has rows: one re-created at today's head would let anyone who can write the
database re-chain the whole log without the key. A missing row there stops every process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from ..canonical import canonical_json
from ..clock import Clock
from ..db.schema import audit_log, deployment
from ..db.store import Store
from ..errors import ConfigError
from ..files import private_dir, private_file
from ..settings import Settings
from ..trust.keyring import KeyRing, Purpose, key_file, namespace_holding
from . import archive
from . import log as audit
from .head import SignedHead

log = logging.getLogger(__name__)

ROW_ID = 1
RECORD_FILE = "deployment.json"
# Rows read at a time when the whole hot table is looked through.
SCAN_ROWS = 5000

MISSING = (
    "this database's audit log has rows but no deployment row (where its keyed chain "
    "begins): if the log was written before the deployment had a secret key (an upgrade "
    "from 0.1), run `toolrouter audit adopt-key` once, with this deployment's key; if not, "
    "the row was deleted and the audit log may have been tampered with: run `toolrouter "
    "audit verify` and restore the database from a backup"
)
KEYED_BEFORE = (
    "refused: this audit log was already chained with this deployment's key ({evidence}), "
    "so its deployment row was deleted and the log may have been tampered with: run "
    "`toolrouter audit verify` and restore the database from a backup"
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


def register(store: Store, keyring: KeyRing, clock: Clock) -> Deployment:
    """This database's deployment row, written now if it has none and its audit log is
    empty; ``ConfigError`` when it has none over a log with rows, when ``keyring`` is not
    the key the database was set up with, or when the row is not sealed with it."""
    found = read(store) or _write(store, keyring, clock, over_rows=False)
    check_key(found, keyring)
    if not found.verifies(keyring):
        raise ConfigError(FORGED)
    return found


def adopt(
    store: Store,
    keyring: KeyRing,
    clock: Clock,
    *,
    head: SignedHead | None,
    recorded: Path,
) -> Deployment:
    """The deployment row for a log written before the deployment had a key: the keyed
    chain begins after its last row. ``ConfigError`` where the row exists, or where there
    is a sign that the key was used on this log before: then the row was deleted. The signs
    outside the database: ``head`` (the deployment's signed head) names a row, or
    ``recorded`` (written by every process that found the row) exists."""
    found = read(store)
    if found is not None:
        check_key(found, keyring)
        raise ConfigError(
            f"the keyed audit chain is already recorded as beginning after seq "
            f"{found.keyed_from_seq}: nothing to adopt"
        )
    if head is not None and head.seq > 0 and head.verifies(keyring):
        raise ConfigError(KEYED_BEFORE.format(evidence=f"its signed head names seq {head.seq}"))
    if recorded.exists():
        raise ConfigError(
            KEYED_BEFORE.format(evidence=f"{recorded} records its deployment row")
            + "; if this database really comes from 0.1, remove that file first"
        )
    return _write(store, keyring, clock, over_rows=True)


def record_file(settings: Settings, namespace: str) -> Path:
    """Where a process that found the deployment row records it, beside the key."""
    return settings.resolved_secrets_dir / namespace / RECORD_FILE


def remember(path: Path, found: Deployment) -> None:
    """Record ``found`` at ``path`` once: that this key sealed a deployment row. Where the
    folder cannot be written (a read-only mount), nothing is recorded."""
    if path.exists():
        return
    try:
        private_dir(path.parent.parent)
        private_dir(path.parent)
        private_file(path).write_text(json.dumps(asdict(found)), encoding="utf-8")
    except OSError:
        log.warning("cannot record the deployment row at %s", path)


def _write(store: Store, keyring: KeyRing, clock: Clock, *, over_rows: bool) -> Deployment:
    """Seal and insert the row, the boundary at the chain's head (under the chain's lock,
    so it is exact); the row another process wrote meanwhile, if one did."""
    try:
        with store.transaction() as conn:
            audit.lock_chain(conn)
            # Read again under the lock: a process that started at the same moment may
            # have written it, and appended rows after it.
            if conn.execute(select(deployment.c.id)).first() is None:
                head_seq, _ = audit.chain_head(conn)
                if head_seq != 0 and not over_rows:
                    raise ConfigError(MISSING)
                if over_rows:
                    _refuse_a_keyed_past(conn, keyring)
                draft = Deployment(keyring.fingerprint, head_seq, clock(), "")
                sealed = dataclasses.replace(
                    draft, mac=keyring.sign(Purpose.AUDIT_HEAD, draft.sealed_text())
                )
                conn.execute(deployment.insert(), [{"id": ROW_ID, **asdict(sealed)}])
    except IntegrityError:
        pass  # another process registered it first; read theirs
    found = read(store)
    assert found is not None
    return found


def _refuse_a_keyed_past(conn: Connection, keyring: KeyRing) -> None:
    """``ConfigError`` where the log shows it was chained with ``keyring`` already: a row
    hashed with it, or a checkpoint signed with it."""
    keyed = audit.AuditLog(keyring)
    rows = conn.execute(select(audit_log).execution_options(yield_per=SCAN_ROWS))
    try:
        for found in rows:
            row = dict(found._mapping)
            try:
                hashed_with_the_key = keyed.row_hash(row) == row["hash"]
            except (TypeError, ValueError):
                continue  # a row no writer makes (verify reports it)
            if hashed_with_the_key:
                evidence = f"row {row['seq']} is hashed with it"
                raise ConfigError(KEYED_BEFORE.format(evidence=evidence))
    finally:
        rows.close()  # a server-side cursor on PostgreSQL, left open by a refusal
    if archive.signed_checkpoint(conn, keyring):
        raise ConfigError(KEYED_BEFORE.format(evidence="a checkpoint is signed with it"))


class KeyMismatch(ConfigError):
    """The key given is not the one the database was set up with (``fingerprint``)."""

    def __init__(self, reason: str, fingerprint: str) -> None:
        super().__init__(reason)
        self.fingerprint = fingerprint


def check_key(found: Deployment, keyring: KeyRing) -> None:
    """``KeyMismatch`` when ``keyring`` is not the key ``found`` names."""
    if found.key_fingerprint != keyring.fingerprint:
        raise KeyMismatch(
            f"the secret key from {keyring.source or 'the settings'} (fingerprint "
            f"{keyring.fingerprint[:12]}) is not the key this database was set up with "
            f"(fingerprint {found.key_fingerprint[:12]}): give this deployment's key in "
            "TOOLROUTER_SECRET_KEY or its key file",
            found.key_fingerprint,
        )


@contextmanager
def moved_namespace_told(settings: Settings, namespace: str) -> Iterator[None]:
    """A key mismatch, told as a moved namespace where this deployment's key is found
    under another one: the namespace follows the database's path, and a project folder
    moved or renamed gives it a new one, with a new key file."""
    try:
        yield
    except KeyMismatch as mismatch:
        if settings.secret_key.get_secret_value() or settings.namespace:
            raise
        moved = namespace_holding(settings, mismatch.fingerprint)
        if moved is None or moved == namespace:
            raise
        raise ConfigError(
            f"this deployment's key is in {key_file(settings, moved)}, under the namespace "
            f"{moved}; the namespace is derived from the database's path, so it is now "
            f"{namespace} (was the folder moved or renamed?): set TOOLROUTER_NAMESPACE="
            f"{moved} in every process of this deployment"
        ) from None
