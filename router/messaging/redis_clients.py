"""Reaching Redis: one server by URL, or a primary found through Redis Sentinel.

``TOOLROUTER_REDIS_URL`` takes redis-py's URLs (``redis://``, ``rediss://``, ``unix://``)
or the Sentinel form Celery and kombu use, the sentinels' addresses joined by ``;``::

    sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379;sentinel://10.0.0.3:26379/0

with the name of the primary the sentinels watch in ``TOOLROUTER_REDIS_SENTINEL_MASTER``.
A password in the first address is the primary's. Every process reaches Redis through
``redis_client``, ``async_redis_client`` and ``broker_settings`` (Celery's transport), so
the broker, the completion wake-ups, the approval replies, rate limits and caches all
follow the sentinels to a new primary after a failover.

Inside toolrouter the primary's name rides in the URL (``?master_name=``), so whatever
passes the URL along passes it too; kombu is given its own form.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import MasterNotFoundError, Sentinel

from ..guards import eviction_warning

log = logging.getLogger(__name__)

SCHEME = "sentinel://"
MASTER_PARAM = "master_name"
DEFAULT_SENTINEL_PORT = 26379


# What redis-py says of each sentinel it tried, inside the reprs of their clients.
_SENTINEL_CAUSE = re.compile(r" - \w+:\w+: (.*?)(?=, <redis|$)")


class RedisUrlError(ValueError):
    """A Redis URL toolrouter cannot use, said in a sentence."""


def redis_problem(exc: BaseException) -> str:
    """``exc`` as an operator reads it. redis-py's "no primary found" through Sentinel
    holds the repr of every client it tried (options, pools, objects): only its first
    words and what each sentinel answered are kept."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, MasterNotFoundError):
        return text
    head = text.split(" : ", 1)[0]
    causes = _SENTINEL_CAUSE.findall(text)
    return f"{head} ({'; '.join(causes)})" if causes else head


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """Where the sentinels are, which primary they watch, and what to ask of it."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    password: str | None
    username: str | None


def is_sentinel(url: str) -> bool:
    return url.startswith(SCHEME)


def with_master(url: str, master: str) -> str:
    """``url`` with the primary's name in it, for a Sentinel URL; other URLs unchanged."""
    if not is_sentinel(url) or not master:
        return url
    base, _, query = url.partition("?")
    kept = [part for part in query.split("&") if part and not part.startswith(MASTER_PARAM)]
    return f"{base}?{'&'.join([*kept, f'{MASTER_PARAM}={master}'])}"


def sentinel_target(url: str) -> SentinelTarget:
    """The parts of a Sentinel URL; ``RedisUrlError`` if it names no primary or sentinel."""
    base, _, query = url.partition("?")
    master = parse_qs(query).get(MASTER_PARAM, [""])[0]
    if not master:
        raise RedisUrlError(
            "a sentinel:// Redis URL needs the primary's name: set TOOLROUTER_REDIS_SENTINEL_MASTER"
        )
    sentinels: list[tuple[str, int]] = []
    db, password, username = 0, None, None
    for i, address in enumerate(base.split(";")):
        if not address.startswith(SCHEME):
            raise RedisUrlError(f"every address of a Sentinel URL starts with {SCHEME}")
        parts = urlsplit(address)
        if not parts.hostname:
            raise RedisUrlError("a Sentinel address without a host")
        try:
            port = parts.port or DEFAULT_SENTINEL_PORT
        except ValueError:
            raise RedisUrlError("a Sentinel address with a port that is not a number") from None
        sentinels.append((parts.hostname, port))
        if i == 0:
            password = unquote(parts.password) if parts.password else None
            username = unquote(parts.username) if parts.username else None
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise RedisUrlError("the database of a Sentinel URL is a number: /0")
            db = int(path)
    return SentinelTarget(tuple(sentinels), master, db, password, username)


def redis_client(url: str, **options: Any) -> redis.Redis:
    """A redis-py client for ``url`` (``options``: the client's, such as timeouts)."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **options)
    target = sentinel_target(url)
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=_for_sentinels(options))
    return sentinel.master_for(target.master, **_for_primary(target, options))


def async_redis_client(url: str, **options: Any) -> aioredis.Redis:
    """An asyncio redis-py client for ``url``."""
    if not is_sentinel(url):
        return aioredis.Redis.from_url(url, **options)
    target = sentinel_target(url)
    sentinel = AsyncSentinel(list(target.sentinels), sentinel_kwargs=_for_sentinels(options))
    return sentinel.master_for(target.master, **_for_primary(target, options))


def warn_if_redis_may_evict(url: str) -> str | None:
    """Log ``guards.eviction_warning`` once, at start-up; returns it (for tests)."""
    client = redis_client(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        warning = eviction_warning(client)
    finally:
        client.close()
    if warning is not None:
        log.warning(warning)
    return warning


def broker_settings(url: str) -> tuple[str, dict[str, Any]]:
    """What Celery is given: its broker URL, and the transport options it needs besides
    (for Sentinel, kombu's own form of the URL and the primary's name)."""
    if not is_sentinel(url):
        return url, {}
    target = sentinel_target(url)
    return url.partition("?")[0], {"master_name": target.master}


def _for_sentinels(options: dict[str, Any]) -> dict[str, Any]:
    # The sentinels are asked with the same patience as the primary.
    keys = ("socket_timeout", "socket_connect_timeout")
    return {key: options[key] for key in keys if key in options}


def _for_primary(target: SentinelTarget, options: dict[str, Any]) -> dict[str, Any]:
    return {
        **options,
        "db": target.db,
        "password": target.password,
        "username": target.username,
    }
