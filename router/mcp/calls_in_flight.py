"""What MCP requests carry beyond the tool and its arguments: an idempotency key in
``_meta``, and cancellation by ``notifications/cancelled``.

A cancelled request may have been answered by a handler that is already gone (stdio
interrupts it before the notification is handled) or may be waiting in another stateless
HTTP request, so the calls a key's requests made are remembered here for a while, by the
request's id, whatever became of the handler.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRequest

IDEMPOTENCY_META = "toolrouter/idempotency_key"
# How long a request's call can still be cancelled by the request's id after its handler
# stopped waiting; long enough for a notification sent right after giving up.
FORGET_AFTER_S = 120.0


def idempotency_key_of(params: Any) -> str | None:
    """The idempotency key in a request's ``_meta``, if any (checked like the HTTP field)."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or IDEMPOTENCY_META not in meta:
        return None
    key = meta[IDEMPOTENCY_META]
    if not isinstance(key, str):
        raise BadRequest(f"_meta.{IDEMPOTENCY_META} must be a string")
    return key


@dataclass
class _Entry:
    call_id: str
    since: float = field(default_factory=time.monotonic)


class CallsInFlight:
    """``(key, request id) -> call id`` for the requests this process took."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str, str], list[_Entry]] = {}
        self._swept = time.monotonic()

    def add(self, owner: str, request_id: object, call_id: str) -> None:
        self._forget_old()
        self._calls.setdefault(_key(owner, request_id), []).append(_Entry(call_id))

    def done(self, owner: str, request_id: object, call_id: str) -> None:
        """The request was answered: its id no longer names this call."""
        entries = self._calls.get(_key(owner, request_id), [])
        entries[:] = [entry for entry in entries if entry.call_id != call_id]
        if not entries:
            self._calls.pop(_key(owner, request_id), None)

    def take(self, owner: str, request_id: object) -> str | None:
        """The call a cancelled request made, if exactly one unanswered request of the key
        had that id (stateless clients may reuse ids: an ambiguous cancel is ignored)."""
        entries = self._calls.get(_key(owner, request_id), [])
        if len(entries) != 1:
            return None
        self._calls.pop(_key(owner, request_id), None)
        return entries[0].call_id

    def _forget_old(self) -> None:
        now = time.monotonic()
        if now - self._swept < FORGET_AFTER_S / 4:
            return
        self._swept, cutoff = now, now - FORGET_AFTER_S
        for name, entries in list(self._calls.items()):
            entries[:] = [entry for entry in entries if entry.since > cutoff]
            if not entries:
                del self._calls[name]


def _key(owner: str, request_id: object) -> tuple[str, str, str]:
    # 7 and "7" are different JSON-RPC ids.
    return owner, type(request_id).__name__, str(request_id)
