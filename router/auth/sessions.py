"""Inbox sessions: an opaque random id in an httpOnly, SameSite=Strict cookie, stored only
as its SHA-256 in the database, with an expiry; ended by signing out and by revoking the
key. The cookie is not a key: it opens ``/ui/`` and nothing else.

Forms carry a CSRF token derived from the session (with the deployment's session key);
sign-in, which has no session yet, checks the request's origin instead, and failed
sign-ins are throttled per client address.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
from sqlalchemy import and_, select, update

from .. import metrics
from ..clock import Clock
from ..db.schema import ui_sessions
from ..db.store import Store
from ..trust.keyring import KeyRing, Purpose
from ..trust.row_seals import session_row_seal
from .keys import Principal, principal_named

log = logging.getLogger(__name__)

COOKIE = "tr_session"
FLASH_COOKIE = "tr_flash"
# A flash message's bytes at most: in base64 with its signature, well within a cookie.
FLASH_BYTES = 2400
# Sessions one key may hold at once; the oldest end first.
MAX_SESSIONS_PER_KEY = 20


@functools.lru_cache(maxsize=1024)
def _report_unsealed(id_hash: str, key_name: str) -> None:
    """Once per row, not at every request that names it."""
    log.warning("an inbox session of %r is not sealed with this deployment's key", key_name)
    metrics.tampered(metrics.Tampered.UI_SESSION)


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
                        "seal": session_row_seal(
                            self.keyring, session.id_hash, who.name, session.expires_ms
                        ),
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
            if row is not None and not self._sealed(row):
                row = None
            who = principal_named(conn, row.key_name, self.keyring) if row is not None else None
        if row is None or who is None:
            return None
        return Session(row.id_hash, row.key_name, row.expires_at), who

    def _sealed(self, row: Any) -> bool:
        """A session row written without the secret key, or pointed at another key in the
        database, is no session (sessions of before the seal end with it)."""
        if row.seal is not None and hmac.compare_digest(
            session_row_seal(self.keyring, row.id_hash, row.key_name, row.expires_at), row.seal
        ):
            return True
        _report_unsealed(row.id_hash, row.key_name)
        return False

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

    def sign_flash(self, message: str, session: str) -> str:
        """The flash cookie's value: ``message`` cut, at a character's end, to what a
        cookie holds (browsers drop one over 4 KB, and the message with it), and signed for
        the session cookie ``session`` alone (one copied from another session shows nothing)."""
        text = message.encode("utf-8")
        if len(text) > FLASH_BYTES:
            text = text[: FLASH_BYTES - 3].decode("utf-8", "ignore").encode("utf-8") + "…".encode()
        body = base64.urlsafe_b64encode(text).decode("ascii")
        return f"{body}.{self.keyring.sign(Purpose.SESSION, _flash_signed(session, body))}"

    def read_flash(self, value: str | None, session: str) -> str | None:
        if not value or "." not in value:
            return None
        body, signature = value.rsplit(".", 1)
        if not self.keyring.verify(Purpose.SESSION, _flash_signed(session, body), signature):
            return None
        try:
            return base64.urlsafe_b64decode(body.encode("ascii")).decode("utf-8")
        except (ValueError, UnicodeError):
            return None


def _flash_signed(session: str, body: str) -> str:
    # The session's digest, not the session itself: the signed text never holds a secret.
    return f"flash|{hashlib.sha256(session.encode('utf-8', 'replace')).hexdigest()}|{body}"


def throttled_as(address: str) -> str:
    """Whom a sign-in from ``address`` counts against: an IPv6 client holds a whole /64
    (a fresh address per guess costs it nothing), so its network; an IPv4 address, mapped
    into IPv6 or not, as itself."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


# Failed sign-ins of one address, shared by every API process: a sorted set of the Redis
# server's times in microseconds (the processes' clocks differ), the newest ARGV[1] (the
# limit) only, expiring on its own. ARGV[3] is 1 to record a failure (member ARGV[4]), 2
# to record one only if fewer than the limit are in the window (a sign-in about to be
# tried), 0 to only look. Returns the microseconds until fewer than the limit are in the
# window; 0 when a mode 2 failure was recorded.
_SHARED_FAILURES = """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if ARGV[3] == '1' or (ARGV[3] == '2' and count < limit) then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(limit + 1))
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000) + 1000)
  if ARGV[3] == '2' then return 0 end
end
if redis.call('ZCARD', KEYS[1]) < limit then return 0 end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(0, tonumber(oldest[2]) + window - now)
"""


class _Mode(Enum):
    """What ``_SHARED_FAILURES`` does besides answering (its ARGV[3])."""

    LOOK = 0
    RECORD = 1
    RECORD_UNDER_LIMIT = 2


@dataclass(frozen=True, slots=True)
class SignInAttempt:
    """A sign-in about to be tried (``LoginThrottle.begin``): counted as failed unless
    ``LoginThrottle.take_back`` is told otherwise; refused, and counted nowhere, when
    ``wait_s`` is more than 0."""

    address: str
    at: float
    member: str
    wait_s: float = 0.0


class LoginThrottle:
    """Failed sign-ins per client address over the last minute: counted in this API process
    and, given a Redis client, in Redis too, where every API process of the deployment
    shares the count. An address waits for whichever count says longer: Redis is not
    trusted, and what it says never makes the throttle weaker than this process's own."""

    WINDOW_S = 60.0
    MAX_ADDRESSES = 10_000
    # After Redis failed to answer, how long this process counts alone before asking again:
    # a Redis that hangs must not make every sign-in wait out its timeout.
    RETRY_S = 10.0

    def __init__(
        self,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        shared: redis.Redis | None = None,
        key_prefix: str = "",
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._shared = shared
        self._script = shared.register_script(_SHARED_FAILURES) if shared is not None else None
        self._key_prefix = key_prefix
        self._retry_at = 0.0

    def wait_s(self, address: str) -> float:
        """0 when ``address`` may try now; else how long until it may."""
        now = self.clock()
        with self._lock:
            failures = self._recent(address, now)
            local = 0.0
            if len(failures) >= self.per_minute:
                local = max(0.0, failures[0] + self.WINDOW_S - now)
        return max(local, self._ask_shared(address, mode=_Mode.LOOK))

    def begin(self, address: str) -> SignInAttempt:
        """Count a sign-in from ``address`` as failed before its key is checked, if the
        address may try now: sign-ins sent in parallel then cannot all pass the check
        before the first of them has failed."""
        now, member = self.clock(), secrets.token_hex(8)
        with self._lock:
            failures = self._recent(address, now)
            if len(failures) >= self.per_minute:
                return SignInAttempt(address, now, member, failures[0] + self.WINDOW_S - now)
            self._record_here(address, now)
        shared = self._ask_shared(address, mode=_Mode.RECORD_UNDER_LIMIT, member=member)
        if shared > 0:
            self._forget_here(address, now)
            return SignInAttempt(address, now, member, shared)
        return SignInAttempt(address, now, member)

    def take_back(self, attempt: SignInAttempt) -> None:
        """The attempt was no wrong key (it was accepted, or could not be checked): it no
        longer counts as a failure."""
        self._forget_here(attempt.address, attempt.at)
        if self._shared is None or self.clock() < self._retry_at:
            return
        try:
            self._shared.zrem(self.key(attempt.address), attempt.member)
        except redis.RedisError as exc:
            log.warning("sign-in throttle: Redis did not answer (%s)", exc)

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            self._record_here(address, now)
        self._ask_shared(address, mode=_Mode.RECORD, member=secrets.token_hex(8))

    def key(self, address: str) -> str:
        """The address's count in Redis: hashed, so every key has the same short length."""
        digest = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{self._key_prefix}:{digest}"

    def _ask_shared(self, address: str, *, mode: _Mode, member: str = "") -> float:
        """The shared count's wait (recording a failure first, as ``mode`` says); 0
        without Redis."""
        if self._script is None or self.clock() < self._retry_at:
            return 0.0
        window_us = int(self.WINDOW_S * 1_000_000)
        try:
            answer = self._script(
                keys=[self.key(address)],
                args=[self.per_minute, window_us, mode.value, member],
            )
            return min(self.WINDOW_S, max(0.0, float(answer) / 1_000_000))
        except (redis.RedisError, TypeError, ValueError) as exc:
            # Redis down: fail open to this process's count, as approvers must still sign in.
            self._retry_at = self.clock() + self.RETRY_S
            log.warning("sign-in throttle: Redis did not answer (%s); counting per process", exc)
            return 0.0

    def _record_here(self, address: str, now: float) -> None:
        # Under the lock.
        if len(self._failures) >= self.MAX_ADDRESSES:
            self._failures.clear()  # many addresses at once: start over
        self._recent(address, now).append(now)

    def _forget_here(self, address: str, at: float) -> None:
        with self._lock:
            failures = self._failures.get(address)
            if failures is not None and at in failures:
                failures.remove(at)

    def _recent(self, address: str, now: float) -> deque[float]:
        failures = self._failures.setdefault(address, deque())
        while failures and failures[0] <= now - self.WINDOW_S:
            failures.popleft()
        return failures
