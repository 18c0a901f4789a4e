"""The execution policies that live in Redis, shared by the workers that apply them and the
API that explains them (``dry_run``): per-tool rate limits and the result cache.

One code path each: a dry run asks the same token bucket and the same cache a run does,
only without taking a token.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from .. import metrics
from ..clock import Clock, wall_clock_ms
from ..constants import RATE_BUCKET, RESULT_CACHE
from ..errors import Unavailable
from ..metrics import Untrusted
from ..tools.config import parse_rate
from ..tools.registry import Tool, ToolRegistry
from ..trust.keyring import KeyRing, Purpose
from .namespace import Namespace

log = logging.getLogger(__name__)

# A token bucket per tool, shared by every worker: refilled continuously at the configured
# rate up to its capacity, timed by the Redis server's own clock (workers' clocks differ).
# ARGV[3] is 1 to take a token, 0 to only look (a dry run writes nothing).
# Returns the milliseconds to wait before a token is free (0: one is free, and taken if
# asked) and the tokens left, as text (Lua numbers would be cut to integers).
# Redis is not trusted: a bucket someone wrote is read within what this script writes
# (0 to capacity tokens, taken no later than now), so it cannot hold a tool's calls back
# for longer than one token takes, nor keep doing so once they stop writing.
_TOKEN_BUCKET = """
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2])
local take = ARGV[3] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
if not (ts <= now) then ts = now end
tokens = math.min(capacity, tokens + (now - ts) * per_ms)
if not (tokens >= 0) then tokens = 0 end
local wait = 0
if tokens >= 1 then
  if take then tokens = tokens - 1 end
else
  wait = math.ceil((1 - tokens) / per_ms)
end
if take then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / per_ms) + 1000)
end
return {wait, tostring(tokens)}
"""


@dataclass(frozen=True, slots=True)
class RateState:
    """A tool's bucket as a dry run sees it: nothing taken."""

    limit: str
    capacity: int
    remaining: int
    wait_s: float


class Limiter:
    """Per-tool token buckets in Redis."""

    def __init__(self, client: redis.Redis, namespace: Namespace) -> None:
        self.client, self.namespace = client, namespace
        self._bucket = client.register_script(_TOKEN_BUCKET)

    def _ask(self, tool: Tool, limit: str, *, take: bool) -> tuple[float, float]:
        capacity, per_s = parse_rate(limit)
        bucket = self.namespace.key(RATE_BUCKET, tool.name)
        answer: Any = self._bucket(keys=[bucket], args=[capacity, per_s / 1000, int(take)])
        # No honest answer is more than one token away: the wait is what a deferred call's
        # next look at the bucket (and the reconciler's) is put off by.
        wait_s = min(max(float(answer[0]) / 1000, 0.0), math.ceil(1000 / per_s) / 1000)
        return wait_s, float(answer[1])

    def wait_s(self, tool: Tool) -> float:
        """0 when a token was taken; else how long until one is free (nothing taken)."""
        if not tool.spec.rate_limit:
            return 0.0
        return self._ask(tool, tool.spec.rate_limit, take=True)[0]

    def peek(self, tool: Tool) -> RateState | None:
        """Whether a token is free now and how many, taking none; None without a limit."""
        limit = tool.spec.rate_limit
        if not limit:
            return None
        try:
            wait, tokens = self._ask(tool, limit, take=False)
        except redis.RedisError as exc:
            raise Unavailable(f"redis: {exc}") from None
        capacity = int(parse_rate(limit)[0])
        return RateState(limit, capacity, max(0, math.floor(tokens)), wait)


# How far the clocks of Redis and of the machines that share a cache may differ from ours.
CLOCK_SKEW_MS = 5_000


class ResultCache:
    """Values of successful runs by tool and canonical-argument digest, for ``cache_ttl_s``.

    Each value is stored with its expiry and a tag over the tool, the digest, the expiry and
    the value: Redis is not trusted, and a value planted there, or kept there past its TTL,
    must never become a call's result.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: Namespace,
        keyring: KeyRing,
        *,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.client, self.namespace, self.keyring, self.clock = client, namespace, keyring, clock

    def _key(self, tool: Tool, args_sha256: str) -> str:
        return self.namespace.key(RESULT_CACHE, tool.name, args_sha256)

    def get(self, tool: Tool, args_sha256: str) -> str | None:
        if tool.spec.cache_ttl_s <= 0:
            return None
        try:
            stored = self.client.get(self._key(tool, args_sha256))
        except redis.RedisError:
            return None  # a cache that is down is a miss, not a failure
        if not isinstance(stored, bytes):
            return None
        now = self.clock()
        tag, _, rest = stored.decode("utf-8", "replace").partition("|")
        expires, _, value = rest.partition("|")
        signed = expires.isdigit() and self.keyring.verify(
            Purpose.COMPLETION, f"{tool.name}|{args_sha256}|{expires}|{value}", tag
        )
        if signed:
            # Redis's own expiry is not trusted: the signed one bounds the entry, and so
            # does the tool's TTL now, should the config have lowered it since.
            expires_at = int(expires)
            if now < expires_at <= now + _ttl_ms(tool):
                return value
            # Only we sign: an expiry ahead is ours under a longer TTL, one just past is a
            # clock a little off ours. Only one long past was set back by someone else.
            if expires_at > now - CLOCK_SKEW_MS:
                return None
        elif self.keyring.verify(Purpose.COMPLETION, f"{tool.name}|{args_sha256}|{rest}", tag):
            return None  # written before entries carried their expiry: Redis expires it
        log.warning("a cached result of %s did not verify or is out of date", tool.name)
        metrics.untrusted(Untrusted.CACHED_RESULT)
        return None

    def put(self, tool: Tool, args_sha256: str, value_json: str) -> None:
        if tool.spec.cache_ttl_s <= 0:
            return
        ttl_ms = _ttl_ms(tool)
        expires = self.clock() + ttl_ms
        text = f"{tool.name}|{args_sha256}|{expires}|{value_json}"
        tag = self.keyring.sign(Purpose.COMPLETION, text)
        try:
            self.client.set(
                self._key(tool, args_sha256), f"{tag}|{expires}|{value_json}", px=ttl_ms
            )
        except redis.RedisError:
            pass


def _ttl_ms(tool: Tool) -> int:
    return int(tool.spec.cache_ttl_s * 1000)


def fallback_chain(registry: ToolRegistry, tool: Tool, chain: Sequence[str] | None) -> list[Tool]:
    """The tools a call of ``tool`` that failed for good falls back along, in order: its
    capability chain when it has one, else its tool's ``fallbacks``. Each comes once, never
    the tool itself, one no longer configured, or a gated one (a fallback runs without an
    approval of its own). The worker walks it and a dry run explains it."""
    seen, tools = {tool.name}, []
    for name in chain if chain else tool.spec.fallbacks:
        fallback = registry.get(name)
        if name not in seen and fallback is not None and not fallback.spec.gated:
            seen.add(name)
            tools.append(fallback)
    return tools
