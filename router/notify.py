"""Completion notifications over Redis pub/sub, so waiting callers wake without polling.

Pub/sub is not durable, so waiters also re-read the database once a second: a lost
notification delays an answer by at most that, it never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

import redis
import redis.asyncio as aioredis

from .constants import CALL_DONE_CHANNEL

log = logging.getLogger(__name__)


class Notifier:
    """Announces finished calls (workers, the approval worker, the API on cancel)."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)

    def call_done(self, call_id: str) -> None:
        # Best effort: a waiter that misses this finds the result on its next database read.
        try:
            self.client.publish(CALL_DONE_CHANNEL, call_id)
        except redis.RedisError as exc:
            log.warning("could not announce completion of %s: %s", call_id, exc)


class CompletionListener:
    """One pub/sub subscription per API process, fanned out to the callers waiting on it."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    @contextlib.contextmanager
    def waiting_for(self, call_id: str):
        """Register before reading the database, so a completion in between is not missed."""
        event = asyncio.Event()
        self._waiters[call_id].add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(call_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[call_id]

    async def _listen(self) -> None:
        while True:
            client = aioredis.Redis.from_url(self.redis_url)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(CALL_DONE_CHANNEL)
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        call_id = message["data"].decode("utf-8", "replace")
                        for event in self._waiters.get(call_id, ()):
                            event.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("completion listener lost Redis (%s); retrying", exc)
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(Exception):
                    await client.aclose()
