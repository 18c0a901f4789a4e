"""Who recently used keys are, kept by an API process so most requests skip the key lookup.

Without it every request pays a thread hop and a database read to look its key up, a
large part of a short round trip. What a cache of keys must never do is outlive a
revocation, so:

- revoking a key publishes on ``KEYS_CHANGED_CHANNEL``; each API process's pub/sub
  listener empties its cache when it hears that;
- the cache is only used while that listener is subscribed: it starts suspended, is
  resumed (empty) once the subscription stands, and suspended again when it is lost, so
  a process that cannot hear revocations looks every key up;
- a lookup that began before an emptying is not stored after it (the generation check
  below), so a read from before the revocation cannot come back;
- every entry expires after ``TTL_S`` anyway: the bound on a revocation missed in the
  moments before the listener notices that its connection is gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .principal import Principal

TTL_S = 5.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """How a revocation was heard: ``listening`` API processes (None where Redis could
    not be told), ``heard`` of them confirmed within the wait."""

    listening: int | None
    heard: int

    @property
    def unconfirmed(self) -> int | None:
        return None if self.listening is None else self.listening - self.heard


class PrincipalCache:
    """``token hash -> Principal`` for ``TTL_S``; safe to use from any thread."""

    def __init__(
        self,
        *,
        ttl_s: float = TTL_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s, self.max_entries, self.clock = ttl_s, max_entries, clock
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()
        self.generation = 0
        self.active = False

    def resume(self) -> None:
        """Start keeping principals, from empty (revocations can be heard again)."""
        self._forget(active=True)

    def suspend(self) -> None:
        """Stop keeping principals and forget them (revocations cannot be heard)."""
        self._forget(active=False)

    def get(self, digest: str) -> Principal | None:
        if not self.active:
            return None
        entry = self._entries.get(digest)
        if entry is None or entry[0] <= self.clock():
            return None
        return entry[1]

    def put(self, digest: str, principal: Principal, *, generation: int) -> None:
        """Keep ``principal``, unless the cache was emptied since ``generation`` was read."""
        with self._lock:
            if generation != self.generation or not self.active:
                return
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # many keys at once is rare; start over
            self._entries[digest] = (self.clock() + self.ttl_s, principal)

    def clear(self) -> None:
        """Forget every principal (a key was revoked)."""
        self._forget()

    def _forget(self, *, active: bool | None = None) -> None:
        """Empty the cache (and, if given, start or stop keeping principals). A new
        generation, so lookups begun before this are not stored after it."""
        with self._lock:
            self.generation += 1
            self._entries.clear()
            if active is not None:
                self.active = active
