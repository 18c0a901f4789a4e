"""Key revocations across API processes: the revoker announces, each API process forgets
the principals it keeps and acknowledges, and the revoker waits for them.

An acknowledgement carries a tag only an API process of this deployment can make, so
Redis cannot make a revocation look heard when it was not.
"""

from __future__ import annotations

import logging
import secrets
import time

import redis
import redis.asyncio as aioredis

from .. import metrics
from ..auth.key_cache import Acknowledged
from ..constants import KEYS_ACK, KEYS_CHANGED_CHANNEL
from ..metrics import Untrusted
from ..trust.keyring import KeyRing, Purpose
from .namespace import Namespace

log = logging.getLogger(__name__)

# A revocation waits this long for the API processes to confirm they forgot their keys.
KEYS_ACK_TIMEOUT_S = 1.5
KEYS_ACK_TTL_S = 30


def announce(
    client: redis.Redis,
    namespace: Namespace,
    keyring: KeyRing,
    *,
    ack_timeout_s: float = KEYS_ACK_TIMEOUT_S,
) -> Acknowledged:
    """Tell the API processes to forget the principals they keep (a key was revoked),
    and wait until each one that heard it says it has: once this returns, no new
    request gets in with the revoked key, unless some did not confirm."""
    # Best effort: a process that misses this forgets within ``key_cache.TTL_S``.
    nonce = secrets.token_hex(8)
    acks = namespace.key(KEYS_ACK, nonce)
    listening: int | None = None
    heard = 0
    try:
        listening = int(client.publish(namespace.key(KEYS_CHANGED_CHANNEL), nonce))
        deadline = time.monotonic() + ack_timeout_s
        while heard < listening and (left := deadline - time.monotonic()) > 0:
            popped = client.blpop([acks], timeout=max(left, 0.01))
            if popped is None:
                break
            # Only an API process holds the key to acknowledge; Redis cannot.
            if keyring.verify(Purpose.KEYS, nonce, _text(popped[1])):
                heard += 1
            else:
                metrics.untrusted(Untrusted.KEY_ACK)
        client.delete(acks)
    except redis.RedisError as exc:
        # Told, when the publish went through: only the confirmations are unknown past it.
        log.warning("could not announce a key revocation: %s", exc)
    return Acknowledged(listening, heard)  # the caller says what was not confirmed


async def acknowledge(
    client: aioredis.Redis, namespace: Namespace, keyring: KeyRing, nonce: bytes
) -> None:
    """Tell the revoker this process has forgotten its keys."""
    text = nonce.decode("ascii", "replace")[:64]
    key = namespace.key(KEYS_ACK, text)
    try:
        async with client.pipeline(transaction=False) as pipe:
            pipe.rpush(key, keyring.sign(Purpose.KEYS, text))
            pipe.expire(key, KEYS_ACK_TTL_S)
            await pipe.execute()
    except Exception as exc:
        log.warning("could not acknowledge a key revocation: %s", exc)


def _text(value: bytes | str) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value
