"""Start-up guard: warn about a Redis that may drop queued messages.

Checked once when a worker starts (``worker_init``), never on the hot path. A Redis
whose ``maxmemory-policy`` is not ``noeviction`` may drop queued messages under memory
pressure: the reconciler would re-publish them, late, so this is a warning.

No time limit needs guarding: Redis never hands a message out twice (the broker keeps no
unacked messages to redeliver, ``router.messaging.celery_app``), and the lease on a
running call always outlasts its hard time limit (``Executor.lease_ms`` adds the
publisher's grace to ``lease_grace_s``), so no value of the settings lets the reaper give
up on a run its worker has not yet stopped.
"""

from __future__ import annotations

import logging

import redis

log = logging.getLogger(__name__)

SAFE_EVICTION_POLICY = "noeviction"


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
