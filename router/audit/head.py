"""The audit chain's signed head, kept outside the database.

The keyed chain shows an edited or inserted row, but not rows removed from its end: the
last row left looks like a head. So the approval worker exports the head (last ``seq`` and
its hash, signed with the deployment's key) every few seconds to a file in the secrets
directory, beside the key and away from the database; ``verify`` then finds the rows the
signed head names, or says they are gone. A head only moves forward: when the chain is
found behind the file, the file is kept as evidence and the mismatch is logged.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ..canonical import canonical_json
from ..clock import Clock
from ..db.schema import audit_log
from ..db.store import Store
from ..files import private_dir
from ..settings import Settings
from ..trust.keyring import KeyRing, Purpose
from . import log as audit
from .archive import covering_checkpoint

log = logging.getLogger(__name__)

HEAD_FILE = "audit-head.json"


@dataclass(frozen=True, slots=True)
class SignedHead:
    namespace: str
    seq: int
    hash: str
    at: int
    mac: str = ""

    def signed_text(self) -> str:
        return canonical_json(
            {"namespace": self.namespace, "seq": self.seq, "hash": self.hash, "at": self.at}
        )

    def signed(self, keyring: KeyRing) -> SignedHead:
        mac = keyring.sign(Purpose.AUDIT_HEAD, self.signed_text())
        return SignedHead(self.namespace, self.seq, self.hash, self.at, mac)

    def verifies(self, keyring: KeyRing) -> bool:
        return keyring.verify(Purpose.AUDIT_HEAD, self.signed_text(), self.mac)


def head_file(settings: Settings, namespace: str) -> Path:
    return settings.resolved_secrets_dir / namespace / HEAD_FILE


def current(store: Store, keyring: KeyRing, namespace: str, clock: Clock) -> SignedHead:
    """The chain's head as the database holds it now, signed."""
    with store.reading() as conn:
        seq, last_hash = audit.chain_head(conn)
    # A signed head leaves the database: every row it covers must be on disk first, or a
    # crash could undo rows it names and ``verify`` would report them removed.
    store.wait_for_disk()
    return SignedHead(namespace, seq, last_hash, clock()).signed(keyring)


def read(path: Path) -> SignedHead | None:
    """The head in ``path``; None when there is none. A file that does not parse is a head
    that cannot verify (``verify`` reports it), not a missing one."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return SignedHead("", -1, "", 0, "unreadable")
    try:
        fields = (data["namespace"], data["seq"], data["hash"], data["at"], data["mac"])
        return SignedHead(
            str(fields[0]), int(fields[1]), str(fields[2]), int(fields[3]), str(fields[4])
        )
    except (KeyError, TypeError, ValueError):
        return SignedHead("", -1, "", 0, "unreadable")


def export(
    store: Store,
    keyring: KeyRing,
    namespace: str,
    path: Path,
    clock: Clock,
    *,
    keyed_from_seq: int = 0,
) -> SignedHead:
    """Write the current signed head to ``path`` (0600, atomically), unless the file holds
    a valid head further on: then the chain lost rows, and the file stays as evidence.
    ``keyed_from_seq`` is where the keyed chain begins: checkpoints up to it predate the
    key and are unsigned."""
    head = current(store, keyring, namespace, clock)
    kept = read(path)
    if kept is not None and kept.verifies(keyring) and kept.seq > head.seq:
        # Another exporter may have written a newer head since the read above.
        head = current(store, keyring, namespace, clock)
    if kept is not None and kept.verifies(keyring) and kept.seq > head.seq:
        log.error(
            "the audit chain ends at seq %d but its signed head names seq %d: rows were "
            "removed; keeping %s as evidence",
            head.seq,
            kept.seq,
            path,
        )
        return kept
    if kept is not None and kept.seq == head.seq and kept.hash == head.hash:
        return kept
    if (
        kept is not None
        and kept.verifies(keyring)
        and not _still_holds(store, keyring, kept, keyed_from_seq)
    ):
        log.error(
            "the audit chain no longer holds seq %d as its signed head names it: rows were "
            "removed or rewritten; keeping %s as evidence",
            kept.seq,
            path,
        )
        return kept
    private_dir(path.parent.parent)
    private_dir(path.parent)
    # A name of its own: exporters on several machines may share the directory.
    fd, draft = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(asdict(head), sort_keys=True) + "\n")
    os.replace(draft, path)
    return head


def _still_holds(store: Store, keyring: KeyRing, kept: SignedHead, keyed_from_seq: int) -> bool:
    """Whether the chain still has ``kept``'s row with its hash, or archived it under a
    checkpoint the key signed: new rows appended after a deletion, or after a checkpoint
    made up to cover it, would otherwise carry the head past the rows removed."""
    if kept.seq <= 0:
        return kept.hash == audit.GENESIS_HASH
    with store.reading() as conn:
        stored = conn.execute(select(audit_log.c.hash).where(audit_log.c.seq == kept.seq)).scalar()
        if stored is not None:
            return bool(stored == kept.hash)
        covering = covering_checkpoint(conn, kept.seq)
    if covering is None:
        return False
    if covering.through_seq > keyed_from_seq and not covering.verifies(keyring):
        return False
    # Archived: ``verify`` checks segments against their signed checkpoints.
    return covering.through_seq != kept.seq or covering.last_hash == kept.hash
