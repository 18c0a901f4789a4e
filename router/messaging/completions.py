"""Completion notifications over Redis pub/sub, so waiting callers wake without polling.

Pub/sub only wakes a waiter; what the caller is told is what the database holds. A
worker's notification may carry the result it has just committed (when it is small),
tagged with the deployment's completion key, so the waiter need not read the row back;
a result whose tag does not verify (Redis is not trusted) is dropped, counted, and the
waiter reads the database instead. Pub/sub is not durable, so waiters also re-read the
database once a second: a lost notification delays an answer by at most that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from .. import metrics
from ..auth.key_cache import Acknowledged
from ..constants import CALL_DONE_CHANNEL, KEYS_CHANGED_CHANNEL
from ..metrics import Untrusted
from ..results import CallResult, content_blocks
from ..trust.keyring import KeyRing, Purpose
from . import revocations
from .namespace import Namespace
from .redis_clients import async_redis_client, redis_client
from .revocations import KEYS_ACK_TIMEOUT_S

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from ..auth.key_cache import PrincipalCache

log = logging.getLogger(__name__)

# Results larger than this are not sent; waiters read them from the database.
MAX_RESULT_BYTES = 64 * 1024
# Completions the listener remembers, for waiters that register just after one: the API
# registers after its submit returns, and a fast tool can finish before that.
RECENT_MAX = 10_000
RECENT_TTL_S = 30.0
# And at most this many bytes of their messages: anyone who can publish can send 10,000
# messages of the largest size; the oldest are then forgotten sooner.
RECENT_MAX_BYTES = 32 * 1024 * 1024
# How long a stop waits for the listener to end, before and after closing its connection.
STOP_WAIT_S = 2.0
_RESULT_FIELDS = ("status", "tool", "value", "error", "error_type", "request_id", "answered_by")
# Between a message's JSON and its tag (64 hex characters at the very end).
TAG_SEPARATOR = b"|"
TAG_LENGTH = 64
# The longest message a worker sends: a result of MAX_RESULT_BYTES, and its tag.
MAX_MESSAGE_BYTES = MAX_RESULT_BYTES + len(TAG_SEPARATOR) + TAG_LENGTH


def completion_message(call_id: str, result: CallResult | None, keyring: KeyRing) -> str:
    """The pub/sub message: the call id alone, or ``{"call_id", "result"}|tag``."""
    if result is None:
        return call_id
    fields = {name: getattr(result, name) for name in _RESULT_FIELDS}
    if result.content is not None:
        fields["content"] = result.content
    text = json.dumps({"call_id": call_id, "result": fields}, separators=(",", ":"))
    if len(text) > MAX_RESULT_BYTES:
        return call_id
    return f"{text}|{keyring.sign(Purpose.COMPLETION, text)}"


_ID_PREFIX = b'{"call_id":"'


def completion_call_id(data: bytes, keyring: KeyRing) -> str | None:
    """The call id of a message, read without parsing the result that comes with it: every
    API process hears every completion, and most have nobody waiting for them (a batch's
    calls, other processes' callers)."""
    if data.startswith(_ID_PREFIX):
        end = data.find(b'"', len(_ID_PREFIX))
        candidate = data[len(_ID_PREFIX) : end] if end > 0 else b""
        if candidate and b"\\" not in candidate:
            return candidate.decode("utf-8", "replace")
    parsed = parse_completion(data, keyring)  # a message written some other way
    return parsed[0] if parsed is not None else None


def parse_completion(data: bytes, keyring: KeyRing) -> tuple[str, CallResult | None] | None:
    """``(call_id, result or None)`` from a message; None for one that makes no sense. A
    result whose tag does not verify is dropped: the message is then only a wake-up."""
    if not data.startswith(b"{"):
        return data.decode("utf-8", "replace"), None
    body_bytes, separator, tag = data.rpartition(TAG_SEPARATOR)
    try:
        body = json.loads(body_bytes if separator else data)
        call_id, fields = body["call_id"], body["result"]
        result = CallResult(
            call_id=call_id,
            content=content_blocks(fields.get("content")),
            **{name: fields[name] for name in _RESULT_FIELDS},
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        log.warning("ignoring a malformed completion message")
        return None
    if not isinstance(call_id, str):
        return None
    if not (
        separator
        and len(tag) == TAG_LENGTH
        and keyring.verify(Purpose.COMPLETION, body_bytes, tag.decode("ascii", "replace"))
    ):
        log.warning("a completion of %s did not verify; reading the database", call_id[:64])
        metrics.untrusted(Untrusted.COMPLETION)
        return call_id, None
    return call_id, result


class Notifier:
    """Announces finished calls (workers, the approval worker, the API on cancel)."""

    def __init__(self, redis_url: str, namespace: Namespace, keyring: KeyRing) -> None:
        self.client = redis_client(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self.namespace, self.keyring = namespace, keyring
        self.channel = namespace.key(CALL_DONE_CHANNEL)

    def call_done(self, call_id: str, result: CallResult | None = None) -> None:
        """``result``, when given, must be what a read of the committed row would answer."""
        self.calls_done([(call_id, result)])

    def calls_done(self, done: Sequence[tuple[str, CallResult | None]]) -> None:
        """``call_done`` for each of ``done``, in one round trip to Redis."""
        # Best effort: a waiter that misses this finds the result on its next database read.
        try:
            if len(done) == 1:
                call_id, result = done[0]
                self.client.publish(self.channel, completion_message(call_id, result, self.keyring))
                return
            pipe = self.client.pipeline(transaction=False)
            for call_id, result in done:
                pipe.publish(self.channel, completion_message(call_id, result, self.keyring))
            pipe.execute()
        except redis.RedisError as exc:
            ids = ", ".join(call_id for call_id, _ in done)
            log.warning("could not announce completion of %s: %s", ids, exc)

    def keys_changed(self, *, ack_timeout_s: float = KEYS_ACK_TIMEOUT_S) -> Acknowledged:
        """``revocations.announce``: tell the API processes a key was revoked, and wait for
        them to say they forgot their keys."""
        return revocations.announce(
            self.client, self.namespace, self.keyring, ack_timeout_s=ack_timeout_s
        )


@dataclass(eq=False, slots=True)
class _ListenerRun:
    """One listening task's own state: a stop tells only the task it stops."""

    stopping: bool = False
    client: aioredis.Redis | None = None


@dataclass(eq=False, slots=True)
class Heard:
    """A completion heard: its message is parsed only when a waiter asks for it."""

    at: float
    message: bytes | None
    result: CallResult | None = None
    # The message's length as heard, counted against ``RECENT_MAX_BYTES`` until forgotten.
    size: int = 0

    def parsed(self, keyring: KeyRing) -> CallResult | None:
        if self.message is not None:
            parsed = parse_completion(self.message, keyring)
            self.result = parsed[1] if parsed is not None else None
            self.message = None
        return self.result


@dataclass(eq=False)
class Waiter:
    """One caller waiting for one call: woken by ``event``, with the result if it came."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    result: CallResult | None = None


class CompletionListener:
    """One pub/sub subscription per API process, fanned out to the callers waiting on it.

    It also hears key revocations for ``key_cache``: emptied at each one, used only while
    the subscription stands (see ``router.auth.key_cache``).
    """

    def __init__(
        self,
        redis_url: str,
        namespace: Namespace,
        keyring: KeyRing,
        *,
        key_cache: PrincipalCache | None = None,
        on_completion: Callable[[str], None] | None = None,
    ) -> None:
        self.redis_url, self.namespace, self.keyring = redis_url, namespace, keyring
        self.channel = namespace.key(CALL_DONE_CHANNEL).encode()
        self.keys_channel = namespace.key(KEYS_CHANGED_CHANNEL).encode()
        self.key_cache = key_cache
        # Told of every call id heard finishing (``GroupCommit.in_flight``).
        self.on_completion = on_completion
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._recent: OrderedDict[str, Heard] = OrderedDict()
        self._recent_bytes = 0
        self._task: asyncio.Task[None] | None = None
        self._run: _ListenerRun | None = None

    def start(self) -> None:
        if self._task is None:
            self._run = _ListenerRun()
            self._task = asyncio.get_running_loop().create_task(self._listen(self._run))

    async def stop(self) -> None:
        task, self._task, run, self._run = self._task, None, self._run, None
        if task is None or run is None:
            return
        run.stopping = True
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done and run.client is not None:
            # redis-py can swallow a cancel that lands while it sets up the subscription
            # (an API whose port is taken stops at once): a closed connection ends the read.
            with contextlib.suppress(Exception):
                await run.client.connection_pool.disconnect()
            done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:
            log.warning("completion listener did not stop within %g s", 2 * STOP_WAIT_S)
            return
        with contextlib.suppress(asyncio.CancelledError, Exception):
            task.result()

    @contextlib.contextmanager
    def waiting_for(self, call_id: str) -> Iterator[Waiter]:
        """Register before reading the database, so a completion in between is not missed.

        A completion that arrived shortly before is handed over at once: the waiter starts
        woken, with its result if the message carried one.
        """
        waiter = Waiter()
        recent = self._recent.get(call_id)
        if recent is not None:
            waiter.result = recent.parsed(self.keyring)
            waiter.event.set()
        self._waiters[call_id].add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(call_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[call_id]

    def heard_recently(self, call_id: str) -> bool:
        """Whether a completion of ``call_id`` was heard in the last ``RECENT_TTL_S``."""
        return call_id in self._recent

    def hear(self, message: bytes) -> None:
        """A completion message, as published; one that names no call is ignored, and so is
        one longer than any a worker sends: remembered, it would be held for
        ``RECENT_TTL_S``, and anyone who can publish could fill the process's memory."""
        if len(message) > MAX_MESSAGE_BYTES:
            log.warning("ignoring a completion message of %d bytes", len(message))
            metrics.untrusted(Untrusted.COMPLETION)
            return
        call_id = completion_call_id(message, self.keyring)
        if call_id is None:
            log.warning("ignoring a malformed completion message")
            return
        self._heard(call_id, Heard(time.monotonic(), message, size=len(message)))

    def _heard(self, call_id: str, heard: Heard) -> None:
        """Wake the waiters of ``call_id`` and remember the completion for a while."""
        now = heard.at
        replaced = self._recent.pop(call_id, None)
        if replaced is not None:
            self._recent_bytes -= replaced.size
        self._recent[call_id] = heard
        self._recent_bytes += heard.size
        while self._recent:
            oldest = next(iter(self._recent.values()))
            if (
                len(self._recent) <= RECENT_MAX
                and self._recent_bytes <= RECENT_MAX_BYTES
                and now - oldest.at <= RECENT_TTL_S
            ):
                break
            self._recent_bytes -= self._recent.popitem(last=False)[1].size
        waiters = self._waiters.get(call_id)
        if waiters:
            result = heard.parsed(self.keyring)
            for waiter in waiters:
                waiter.result = result
                waiter.event.set()
        if self.on_completion is not None:
            self.on_completion(call_id)

    async def _listen(self, run: _ListenerRun) -> None:
        while not run.stopping:
            client = run.client = async_redis_client(self.redis_url)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel, self.keys_channel)
                    if self.key_cache is not None:
                        self.key_cache.resume()
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        if message.get("channel") == self.keys_channel:
                            if self.key_cache is not None:
                                self.key_cache.clear()
                            await revocations.acknowledge(
                                client, self.namespace, self.keyring, message["data"]
                            )
                            continue
                        self.hear(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if run.stopping:
                    return
                log.warning("completion listener lost Redis (%s); retrying", exc)
                await asyncio.sleep(1.0)
            finally:
                if self.key_cache is not None:
                    self.key_cache.suspend()
                with contextlib.suppress(Exception):
                    await client.aclose()
