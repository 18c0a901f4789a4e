"""Inbox sessions: the approver's key in an httpOnly, SameSite=Strict cookie, signed with
an expiry, and the CSRF token derived from it.

The cookie carries the bearer key itself (never the URL or local storage), so every page
authenticates it afresh: a revoked key is signed out on its next request. The signature
covers the expiry, so a cookie cannot be stretched past it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

from ..settings import Settings

COOKIE = "tr_session"
FLASH_COOKIE = "tr_flash"


def ui_secret(settings: Settings) -> bytes:
    """``TOOLROUTER_UI_SECRET``, else one generated once and kept in the state dir."""
    if settings.ui_secret:
        return settings.ui_secret.encode("utf-8")
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    path = settings.state_dir / "ui-secret"
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another API process made it first
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(secrets.token_hex(32))
    return path.read_text(encoding="utf-8").strip().encode("utf-8")


def _sign(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "|".join(parts).encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    expires_ms: int

    def csrf(self, secret: bytes) -> str:
        """The token forms must send back; bound to this session, useless without it."""
        return _sign(secret, "csrf", self.token, str(self.expires_ms))


def encode(session: Session, secret: bytes) -> str:
    token = base64.urlsafe_b64encode(session.token.encode("utf-8")).decode("ascii")
    signature = _sign(secret, "session", session.token, str(session.expires_ms))
    return f"{token}.{session.expires_ms}.{signature}"


def decode(value: str | None, secret: bytes, *, now_ms: int) -> Session | None:
    """The session in a cookie value, or None if it is missing, forged or expired."""
    if not value or value.count(".") != 2:
        return None
    token_b64, expires, signature = value.split(".")
    try:
        token = base64.urlsafe_b64decode(token_b64.encode("ascii")).decode("utf-8")
        expires_ms = int(expires)
    except (ValueError, UnicodeError):
        return None
    expected = _sign(secret, "session", token, str(expires_ms))
    if not hmac.compare_digest(expected, signature) or expires_ms <= now_ms:
        return None
    return Session(token=token, expires_ms=expires_ms)


def sign_flash(message: str, secret: bytes) -> str:
    body = base64.urlsafe_b64encode(message[:2000].encode("utf-8")).decode("ascii")
    return f"{body}.{_sign(secret, 'flash', body)}"


def read_flash(value: str | None, secret: bytes) -> str | None:
    if not value or "." not in value:
        return None
    body, signature = value.rsplit(".", 1)
    if not hmac.compare_digest(_sign(secret, "flash", body), signature):
        return None
    try:
        return base64.urlsafe_b64decode(body.encode("ascii")).decode("utf-8")
    except (ValueError, UnicodeError):
        return None
