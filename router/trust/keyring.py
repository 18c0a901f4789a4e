"""The deployment's secret key, and the keyed hashes (HMAC-SHA256) made with it.

Redis, Flower and a copy of the database are outside the trust boundary (see the security
page of the docs); what crosses them and must not be forged carries a tag only a holder of
this key can make: decision messages, approval bindings and releases, audit chain links,
signed heads and checkpoints, results riding on wake-ups. Each use has its own key,
derived from the secret with HKDF, so a tag made for one purpose never passes for another.

The secret comes from ``TOOLROUTER_SECRET_KEY``, else from a file under the secrets
directory (made on first use, 0600 in a 0700 folder), never from the state directory or
the database.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ConfigError
from ..files import private_dir
from ..settings import Settings

SECRET_MIN_CHARS = 32
KEY_FILE = "secret.key"


class Purpose(StrEnum):
    """What a tag vouches for; each purpose has its own derived key."""

    DECISION = "decision"  # decision messages from an API process, and their answers
    APPROVAL = "approval"  # request bindings, recorded decisions, releases
    AUDIT = "audit"  # the audit chain's links
    AUDIT_HEAD = "audit-head"  # signed heads, archival checkpoints, the keyed boundary
    COMPLETION = "completion"  # results riding on completion wake-ups; cached results
    KEYS = "keys"  # acknowledgements of a key revocation
    KEY_ROW = "key-row"  # API key rows (name, token hash, roles, revocation), inbox sessions
    SESSION = "session"  # inbox CSRF tokens
    FINGERPRINT = "fingerprint"  # names the key without revealing it


class KeyRing:
    """Keyed hashes for every ``Purpose``, from one secret."""

    def __init__(self, secret: bytes, *, source: str = "") -> None:
        self.source = source
        self._macs = {
            purpose: hmac.new(_derive(secret, purpose), digestmod=hashlib.sha256)
            for purpose in Purpose
        }
        self.fingerprint = self.sign(Purpose.FINGERPRINT, b"toolrouter")[:32]

    def sign(self, purpose: Purpose, data: bytes | str) -> str:
        """The tag of ``data`` for ``purpose``, as 64 hex characters."""
        mac = self._macs[purpose].copy()
        mac.update(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
        return mac.hexdigest()

    def verify(self, purpose: Purpose, data: bytes | str, tag: object) -> bool:
        """Whether ``tag`` is ``data``'s tag for ``purpose`` (compared in constant time)."""
        if not isinstance(tag, str):
            return False
        return hmac.compare_digest(self.sign(purpose, data), tag)


def _derive(secret: bytes, purpose: Purpose) -> bytes:
    info = f"toolrouter/{purpose.value}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def key_file(settings: Settings, namespace: str) -> Path:
    return settings.resolved_secrets_dir / namespace / KEY_FILE


def load_keyring(settings: Settings, namespace: str) -> KeyRing:
    """The deployment's key ring: ``TOOLROUTER_SECRET_KEY``, else the key file (made once)."""
    configured = settings.secret_key.get_secret_value()
    if configured:
        if len(configured) < SECRET_MIN_CHARS:
            raise ConfigError(
                f"TOOLROUTER_SECRET_KEY must be at least {SECRET_MIN_CHARS} characters"
            )
        return KeyRing(configured.encode("utf-8"), source="TOOLROUTER_SECRET_KEY")
    path = key_file(settings, namespace)
    if not path.exists():
        _create_key_file(path)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the secret key at {path}: {exc.strerror}") from None
    if len(text) < SECRET_MIN_CHARS:
        raise ConfigError(f"the secret key at {path} is under {SECRET_MIN_CHARS} characters")
    return KeyRing(text.encode("utf-8"), source=str(path))


def namespace_holding(settings: Settings, fingerprint: str) -> str | None:
    """The namespace whose key file in the secrets directory holds the key ``fingerprint``
    names, if one does: where a deployment's key went when its namespace changed."""
    for path in sorted(settings.resolved_secrets_dir.glob(f"*/{KEY_FILE}")):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text and KeyRing(text.encode("utf-8")).fingerprint == fingerprint:
            return path.parent.name
    return None


def existing_keyring(settings: Settings, namespace: str) -> KeyRing | None:
    """``load_keyring`` where the deployment has a key already; None where it has none
    (nothing is made: an upgrade run away from the deployment must not invent one)."""
    if settings.secret_key.get_secret_value() or key_file(settings, namespace).exists():
        return load_keyring(settings, namespace)
    return None


def _create_key_file(path: Path) -> None:
    """Write a new key beside ``path`` and link it into place, so a process starting at
    the same moment reads either no file or the whole key, never half of it."""
    private_dir(path.parent.parent)
    private_dir(path.parent)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:
        pass  # another process of this deployment made it first; theirs stands
    finally:
        draft.unlink()
