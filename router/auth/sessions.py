"""Inbox sessions: an opaque random id in an httpOnly, SameSite=Strict cookie, stored only
as its SHA-256 in the database, with an expiry; ended by signing out and by revoking the
key. The cookie is not a key: it opens ``/ui/`` and nothing else.

Forms carry a CSRF token derived from the session (with the deployment's session key);
sign-in, which has no session yet, checks the request's origin instead, and failed
sign-ins are throttled per client address.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import and_, select, update

from ..clock import Clock
from ..db.schema import ui_sessions
from ..db.store import Store
from ..trust.keyring import KeyRing, Purpose
from .keys import Principal, principal_named

COOKIE = "tr_session"
FLASH_COOKIE = "tr_flash"
# Sessions one key may hold at once; the oldest end first.
MAX_SESSIONS_PER_KEY = 20


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    id_hash: str
    key_name: str
    expires_ms: int


class SessionStore:
    """Sessions in the database; the process keeps nothing about them."""

    def __init__(self, store: Store, keyring: KeyRing, clock: Clock) -> None:
        self.store, self.keyring, self.clock = store, keyring, clock

    def start(self, who: Principal, hours: float) -> tuple[str, Session]:
        """A new session for ``who``: the cookie value (shown once) and the session."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        session = Session(_digest(session_id), who.name, now + int(hours * 3_600_000))
        with self.store.transaction() as conn:
            conn.execute(
                ui_sessions.insert(),
                [
                    {
                        "id_hash": session.id_hash,
                        "key_name": who.name,
                        "created_at": now,
                        "expires_at": session.expires_ms,
                        "ended_at": None,
                    }
                ],
            )
            live = conn.execute(
                select(ui_sessions.c.id_hash)
                .where(and_(ui_sessions.c.key_name == who.name, ui_sessions.c.ended_at.is_(None)))
                .order_by(ui_sessions.c.created_at.desc())
                .offset(MAX_SESSIONS_PER_KEY)
            ).all()
            if live:
                conn.execute(
                    update(ui_sessions)
                    .where(ui_sessions.c.id_hash.in_([row.id_hash for row in live]))
                    .values(ended_at=now)
                )
        return session_id, session

    def resolve(self, cookie: str | None) -> tuple[Session, Principal] | None:
        """The live session a cookie names and its key's current principal; None when the
        session is unknown, ended or expired, or its key is revoked."""
        if not cookie or len(cookie) > 128:
            return None
        now = self.clock()
        with self.store.reading() as conn:
            row = conn.execute(
                select(ui_sessions).where(
                    and_(
                        ui_sessions.c.id_hash == _digest(cookie),
                        ui_sessions.c.ended_at.is_(None),
                        ui_sessions.c.expires_at > now,
                    )
                )
            ).first()
            who = principal_named(conn, row.key_name) if row is not None else None
        if row is None or who is None:
            return None
        return Session(row.id_hash, row.key_name, row.expires_at), who

    def end(self, cookie: str | None) -> None:
        if not cookie or len(cookie) > 128:
            return
        with self.store.transaction() as conn:
            conn.execute(
                update(ui_sessions)
                .where(
                    and_(ui_sessions.c.id_hash == _digest(cookie), ui_sessions.c.ended_at.is_(None))
                )
                .values(ended_at=self.clock())
            )

    def csrf(self, session: Session) -> str:
        """The token this session's forms must send back."""
        return self.keyring.sign(Purpose.SESSION, "csrf|" + session.id_hash)

    def csrf_ok(self, session: Session, sent: str) -> bool:
        return self.keyring.verify(Purpose.SESSION, "csrf|" + session.id_hash, sent)

    def sign_flash(self, message: str) -> str:
        body = base64.urlsafe_b64encode(message[:2000].encode("utf-8")).decode("ascii")
        return f"{body}.{self.keyring.sign(Purpose.SESSION, 'flash|' + body)}"

    def read_flash(self, value: str | None) -> str | None:
        if not value or "." not in value:
            return None
        body, signature = value.rsplit(".", 1)
        if not self.keyring.verify(Purpose.SESSION, "flash|" + body, signature):
            return None
        try:
            return base64.urlsafe_b64decode(body.encode("ascii")).decode("utf-8")
        except (ValueError, UnicodeError):
            return None


class LoginThrottle:
    """Failed sign-ins per client address over the last minute, in this API process."""

    WINDOW_S = 60.0
    MAX_ADDRESSES = 10_000

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def wait_s(self, address: str) -> float:
        """0 when ``address`` may try now; else how long until it may."""
        now = self.clock()
        with self._lock:
            failures = self._recent(address, now)
            if len(failures) < self.per_minute:
                return 0.0
            return max(0.0, failures[0] + self.WINDOW_S - now)

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= self.MAX_ADDRESSES:
                self._failures.clear()  # many addresses at once: start over
            self._recent(address, now).append(now)

    def _recent(self, address: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(address, deque())
        while failures and failures[0] <= now - self.WINDOW_S:
            failures.popleft()
        return failures
