"""Execution policies (SPEC §10) around one run: retry backoff, shared rate limits, caching.

Each is a small function of the tool's spec and Redis; the executor decides when to apply
them, so the order of a run stays readable in one place (``workers.execution``).
"""

from __future__ import annotations

import logging
import random
from typing import Any

import redis

from router import metrics
from router.constants import RATE_BUCKET, RESULT_CACHE
from router.messaging.namespace import Namespace
from router.tools.config import parse_rate
from router.tools.registry import Tool
from router.trust.keyring import KeyRing, Purpose

from .handlers import Outcome

log = logging.getLogger(__name__)

# A token bucket per tool, shared by every worker: refilled continuously at the configured
# rate up to its capacity, timed by the Redis server's own clock (workers' clocks differ).
# Returns the milliseconds to wait before a token is free (0: taken).
_TAKE_TOKEN = """
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * per_ms)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) / per_ms) end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / per_ms) + 1000)
return wait
"""


def backoff_s(tool: Tool, attempt: int, outcome: Outcome) -> float:
    """Exponential backoff with full jitter, capped; a service's Retry-After wins if longer."""
    policy = tool.spec.retry
    ceiling = min(policy.max_backoff_s, policy.backoff_s * (2 ** max(0, attempt - 1)))
    delay = random.uniform(ceiling / 2, ceiling)
    if outcome.retry_after_s is not None:
        delay = max(delay, outcome.retry_after_s)
    return delay


def should_retry(tool: Tool, attempt: int, outcome: Outcome) -> bool:
    return (not outcome.ok) and outcome.retryable and attempt < tool.spec.retry.max_attempts


class Limiter:
    """Per-tool token buckets in Redis."""

    def __init__(self, client: redis.Redis, namespace: Namespace) -> None:
        self.client, self.namespace = client, namespace
        self._take = client.register_script(_TAKE_TOKEN)

    def wait_s(self, tool: Tool) -> float:
        """0 when a token was taken; else how long until one is free (nothing taken)."""
        if not tool.spec.rate_limit:
            return 0.0
        capacity, per_s = parse_rate(tool.spec.rate_limit)
        bucket = self.namespace.key(RATE_BUCKET, tool.name)
        waited: Any = self._take(keys=[bucket], args=[capacity, per_s / 1000])
        return float(waited) / 1000


class ResultCache:
    """Values of successful runs by tool and canonical-argument digest, for ``cache_ttl_s``.

    Each value is stored with a tag over the tool, the digest and the value: Redis is not
    trusted, and a value planted there must never become a call's result.
    """

    def __init__(self, client: redis.Redis, namespace: Namespace, keyring: KeyRing) -> None:
        self.client, self.namespace, self.keyring = client, namespace, keyring

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
        tag, _, value = stored.decode("utf-8", "replace").partition("|")
        if not self.keyring.verify(Purpose.COMPLETION, f"{tool.name}|{args_sha256}|{value}", tag):
            log.warning("a cached result of %s did not verify; running the tool", tool.name)
            metrics.untrusted("cached_result")
            return None
        return value

    def put(self, tool: Tool, args_sha256: str, value_json: str) -> None:
        if tool.spec.cache_ttl_s <= 0:
            return
        tag = self.keyring.sign(Purpose.COMPLETION, f"{tool.name}|{args_sha256}|{value_json}")
        try:
            self.client.set(
                self._key(tool, args_sha256),
                f"{tag}|{value_json}",
                px=int(tool.spec.cache_ttl_s * 1000),
            )
        except redis.RedisError:
            pass
