"""What MCP requests carry beyond the tool and its arguments: an idempotency key in
``_meta``, and cancellation by ``notifications/cancelled``.

A cancelled request may have been answered by a handler that is already gone (stdio
interrupts it before the notification is handled) or may be waiting in another stateless
HTTP request, taken by another API process, so the calls a key's requests made are
remembered in Redis for a while, by the request's id, whatever became of the handler.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import redis

from ..constants import MCP_IN_FLIGHT
from ..errors import BadRequest
from ..messaging.namespace import Namespace

log = logging.getLogger(__name__)

IDEMPOTENCY_META = "toolrouter/idempotency_key"
# How long a request's call can still be cancelled by the request's id after its handler
# stopped waiting; long enough for a notification sent right after giving up.
FORGET_AFTER_S = 120.0
# In Redis, under the namespace: a sorted set per key and request id, of the call ids its
# requests made, each scored by when it was added (the Redis server's clock, in ms).

# KEYS[1] the set; ARGV[1] the call id, ARGV[2] FORGET_AFTER_S in ms. Entries older than
# that go first, so a client that reuses one id for every request keeps no stale ones.
_ADD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local forget = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - forget)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], forget)
return 1
"""
# The one call still in the set, removed with the set; nothing if none or several.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
local calls = redis.call('ZRANGE', KEYS[1], 0, 1)
if #calls ~= 1 then return false end
redis.call('DEL', KEYS[1])
return calls[1]
"""


def idempotency_key_of(params: Any) -> str | None:
    """The idempotency key in a request's ``_meta``, if any (checked like the HTTP field)."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or IDEMPOTENCY_META not in meta:
        return None
    key = meta[IDEMPOTENCY_META]
    if not isinstance(key, str):
        raise BadRequest(f"_meta.{IDEMPOTENCY_META} must be a string")
    return key


class CallsInFlight:
    """``(key, request id) -> call id`` for the requests of every API process (and of
    ``toolrouter mcp``), in Redis.

    Blocking (run it ``in_thread``), and best effort: with Redis down a call is not
    remembered and a cancel finds nothing, logged; neither fails the request.
    """

    def __init__(
        self, client: redis.Redis, namespace: Namespace, *, forget_after_s: float = FORGET_AFTER_S
    ) -> None:
        self.client, self.namespace = client, namespace
        self.forget_ms = max(1, round(forget_after_s * 1000))
        self._add = client.register_script(_ADD)
        self._take = client.register_script(_TAKE)

    def add(self, owner: str, request_id: object, call_id: str) -> None:
        try:
            self._add(keys=[self._name(owner, request_id)], args=[call_id, self.forget_ms])
        except redis.RedisError as exc:
            log.warning("MCP call %s cannot be cancelled by its request id: %s", call_id, exc)

    def done(self, owner: str, request_id: object, call_id: str) -> None:
        """The request was answered: its id no longer names this call."""
        try:
            self.client.zrem(self._name(owner, request_id), call_id)
        except redis.RedisError as exc:
            # Left to expire: until then a cancel by that id may still reach the call.
            log.warning("MCP call %s not forgotten: %s", call_id, exc)

    def take(self, owner: str, request_id: object) -> str | None:
        """The call a cancelled request made, if exactly one unanswered request of the key
        had that id (stateless clients may reuse ids: an ambiguous cancel is ignored)."""
        try:
            found = self._take(keys=[self._name(owner, request_id)], args=[self.forget_ms])
        except redis.RedisError as exc:
            log.warning("MCP cancel by request id not applied: %s", exc)
            return None
        if not isinstance(found, bytes):
            return None
        # Redis is not trusted: a planted id only reaches CallService.cancel, which refuses
        # any call but the key's own.
        return found.decode("utf-8", "replace")

    def _name(self, owner: str, request_id: object) -> str:
        # Hashed: a client chooses its ids, of any length. 7 and "7" are different ids.
        named = json.dumps([owner, type(request_id).__name__, str(request_id)])
        return self.namespace.key(MCP_IN_FLIGHT, hashlib.sha256(named.encode()).hexdigest()[:32])
