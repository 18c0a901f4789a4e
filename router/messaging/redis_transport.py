"""kombu's Redis transport, with one redis-py client per channel instead of one per use.

Stock kombu builds a new ``redis.Redis`` each time a channel talks to Redis outside a
worker's event loop (``Channel.conn_or_acquire``): for every publish from the API, the
approval worker and the workers' retries, and (with ack emulation, which toolrouter
turns off) twice more per message in a worker. Building a client fills a
case-insensitive dict of every response callback, a sizeable part of a publish's CPU. A
client only borrows a connection from the channel's pool per command, so one client
serves every use of the channel, from any thread (redis-py clients are thread-safe).

Selected by ``router.messaging.celery_app.celery_settings`` (``broker_transport``) for
every process: the API, the workers, the approval worker, beat and Flower.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Empty
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

# What ``broker_transport`` names, so every process loads this module by the same path.
TRANSPORT = "router.messaging.redis_transport:Transport"
SENTINEL_TRANSPORT = "router.messaging.redis_transport:SentinelTransport"


class Channel(kombu_redis.Channel):
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        shared = self._shared_client
        # A channel rebuilds its pool after a disconnect; a client on the old pool would
        # hand out connections from a pool that was closed.
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()
        yield shared

    def _brpop_read(self, **options: Any) -> Any:
        """A message that is not JSON (Redis is not trusted: anyone who can write to it can
        push one) is dropped with a warning; kombu would let it stop the worker."""
        try:
            return super()._brpop_read(**options)
        except ValueError:
            log.warning("dropped a message that is not JSON from a queue")
            raise Empty() from None


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """The same channel, its pool following the primary the sentinels name."""


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel
