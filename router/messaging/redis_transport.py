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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from queue import Empty
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from .task_headers import header_problem, read_headers

log = logging.getLogger(__name__)

# What ``broker_transport`` names, so every process loads this module by the same path.
TRANSPORT = "router.messaging.redis_transport:Transport"
SENTINEL_TRANSPORT = "router.messaging.redis_transport:SentinelTransport"


# Deletes a key that is neither of the type ARGV[1] nor absent, in one step; answers 1 if
# it did.
DELETE_IF_NOT = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= ARGV[1] and kind ~= 'none' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


def _wrong_type(exc: Exception) -> bool:
    """Whether Redis refused a command for a key of another type (alone or in a pipeline)."""
    return "WRONGTYPE" in str(exc)


class MalformedMessage(Exception):
    """Raised when a payload from Redis is JSON but no message kombu could have sent."""


class Message(virtual.Message):
    """kombu's message, refusing a payload it cannot read with one exception of its own:
    kombu would let whatever its reading raised stop the worker."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        try:
            super().__init__(payload, channel, **kwargs)
            hash(self.delivery_tag)  # the channel keeps it as a dict key until acked
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise MalformedMessage(f"{type(exc).__name__}: {exc}") from None


class Channel(kombu_redis.Channel):
    Message = Message
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

    def basic_consume(
        self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any
    ) -> Any:
        """A message kombu could read but Celery cannot take (a task's name that is a list,
        a time limit that is text) is dropped with a warning and acknowledged, so it is not
        put back in its queue at shutdown to stop the next worker too; Celery would let it
        stop this one."""

        def guarded(message: Any) -> Any:
            headers = read_headers(message.headers, message.body, message.content_type)
            problem = header_problem(headers)
            if problem is not None:
                log.warning("dropped a message from %s that is not one: %s", queue, problem)
                if not no_ack:
                    message.ack()
                return None
            try:
                return callback(message)
            except self.connection.connection_errors:
                raise
            except Exception as exc:
                log.warning("dropped a message from %s that is not one: %r", queue, exc)
                if not no_ack and not message.acknowledged:
                    message.ack()
                return None

        return super().basic_consume(queue, no_ack, guarded, consumer_tag, **kwargs)

    def _brpop_read(self, **options: Any) -> Any:
        """A message that is not JSON, or nested too deep to read (Redis is not trusted:
        anyone who can write to it can push one), is dropped with a warning; kombu would let
        it stop the worker."""
        try:
            return super()._brpop_read(**options)
        except (ValueError, RecursionError):
            log.warning("dropped a message that is not JSON from a queue")
            raise Empty() from None
        except self.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            self._delete_planted_keys(self.active_queues)
            raise Empty() from None

    def _size(self, queue: str) -> Any:
        """The same for the queue's length, which Celery reads as a worker starts (declaring
        its queues): a key planted before the start stopped it there."""
        try:
            return super()._size(queue)
        except self.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            self._delete_planted_keys([queue])
            return super()._size(queue)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> Any:
        """The same for the sets that bind a queue to its exchange, which a worker adds to
        as it starts."""
        try:
            return super()._queue_bind(exchange, routing_key, pattern, queue)
        except self.ResponseError as exc:
            if not _wrong_type(exc):
                raise
            # The permanent twin is not in every kombu the project admits.
            tables = (self.keyprefix_queue, getattr(self, "keyprefix_binding_permanent", None))
            self._delete_planted([t % (exchange,) for t in tables if t is not None], "set")
            return super()._queue_bind(exchange, routing_key, pattern, queue)

    def _delete_planted_keys(self, queues: Iterable[str]) -> None:
        """A queue's key of another type than a list (Redis is not trusted: anyone who can
        write to it can set one) fails the whole ``BRPOP`` on every poll, and kombu would let
        that stop the worker. None of ours is in such a key, so it is deleted."""
        keys = {self._q_for_pri(queue, pri) for queue in queues for pri in self.priority_steps}
        self._delete_planted(sorted(keys), "list")

    def _delete_planted(self, keys: Iterable[str], kind: str) -> None:
        """Delete each of ``keys`` that is not a ``kind``, by a script that checks its type in
        the same step: a key of the right type made meanwhile is never touched."""
        with self.conn_or_acquire() as client:
            for key in keys:
                try:
                    # EVAL's keys are not prefixed by kombu's client, unlike LLEN's.
                    deleted = client.eval(DELETE_IF_NOT, 1, self.global_keyprefix + key, kind)
                except self.ResponseError as exc:
                    log.warning("could not check the key %r: %s", key, exc)
                    continue
                if deleted:
                    log.warning("deleted the key %r: it was not a %s", key, kind)

    def _receive_one(self, c: Any) -> Any:
        """The same for a broadcast (remote control, events): kombu drops one that is not
        JSON, not one nested too deep."""
        try:
            return super()._receive_one(c)
        except RecursionError:
            log.warning("dropped a broadcast that is not JSON")
            raise Empty() from None


class _DropsMalformed:
    """What both transports add to kombu's delivery."""

    def _deliver(self, message: Any, queue: str) -> None:
        """A queue's or a broadcast's message that is JSON but no message at all (a list, a
        dict without kombu's fields) is dropped with a warning, before it can stop the
        worker; it is not kept to be put back in its queue."""
        try:
            super()._deliver(message, queue)  # type: ignore[misc]
        except MalformedMessage as exc:
            log.warning("dropped a message from %s that is not one: %s", queue, exc)


class Transport(_DropsMalformed, kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """The same channel, its pool following the primary the sentinels name."""


class SentinelTransport(_DropsMalformed, kombu_redis.SentinelTransport):
    Channel = SentinelChannel
