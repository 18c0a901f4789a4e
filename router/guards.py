"""Start-up guards: refuse settings that could lose or double a call, warn about a risky Redis.

Checked once when a process starts (``Runtime.prepare`` and the worker's ``worker_init``),
never on the hot path:

- a tool whose hard time limit (``timeout_s`` plus the publisher's grace) reaches the
  broker's ``visibility_timeout`` is refused: Redis would hand its message to a second
  worker while the first still runs it (a ``ConfigError`` naming the tool);
- (the lease on a running call always outlasts that hard limit: ``Executor.lease_ms``
  adds the publisher's grace to ``lease_grace_s``, so no value of the settings lets the
  reaper give up on a run its worker has not yet stopped);
- a Redis whose ``maxmemory-policy`` is not ``noeviction`` may drop queued messages under
  memory pressure: the reconciler would re-publish them, late, so this is a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis

from .errors import ConfigError

log = logging.getLogger(__name__)

SAFE_EVICTION_POLICY = "noeviction"


def check_time_limits(
    timeouts: Mapping[str, float], *, visibility_timeout_s: float, hard_limit_grace_s: float
) -> None:
    """Refuse a tool (``name -> timeout_s``) whose hard time limit is at or above the
    broker's visibility timeout."""
    for name, timeout_s in timeouts.items():
        hard_limit = timeout_s + hard_limit_grace_s
        if hard_limit >= visibility_timeout_s:
            raise ConfigError(
                f"hard time limit {hard_limit:g} s (timeout_s {timeout_s:g} + "
                f"{hard_limit_grace_s:g} s grace) is at or above the broker's visibility "
                f"timeout of {visibility_timeout_s:g} s: Redis would deliver the call again "
                "while it still runs; lower timeout_s",
                tool=name,
            )


def eviction_warning(client: redis.Redis) -> str | None:
    """A warning if Redis may evict keys (queued messages among them); None if it may not,
    or if it will not say (``CONFIG`` disabled, as on some managed services)."""
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except redis.RedisError as exc:
        log.debug("could not read Redis maxmemory-policy: %s", exc)
        return None
    if policy is None or policy == SAFE_EVICTION_POLICY:
        return None
    return (
        f"Redis maxmemory-policy is {policy!r}, not {SAFE_EVICTION_POLICY!r}: under memory "
        "pressure it may drop queued messages (the reconciler re-publishes them, late)"
    )


def warn_if_redis_may_evict(redis_url: str) -> str | None:
    """Log the eviction warning once, at start-up; returns it (for tests)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        warning = eviction_warning(client)
    finally:
        client.close()
    if warning is not None:
        log.warning(warning)
    return warning
