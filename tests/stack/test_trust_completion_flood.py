"""Anyone who can publish to Redis (SPEC §16: not trusted) can send the API's completion
listener as many completions, as large, as they like. It remembers completions for a
while, for waiters that register just after one; what it keeps of forged ones stays
within a bound, so a flood of them cannot fill the API's memory."""

from __future__ import annotations

import json
import time

import psutil
import redis

from router.constants import CALL_DONE_CHANNEL
from router.messaging.namespace import Namespace

from ..support.redis_attacker import redis_client, submit
from ..support.stack import Stack

MIB = 1024 * 1024
# Published a burst at a time, each burst under Redis's output limit for a subscriber
# (32 MiB by default: past it Redis drops the listener, and the flood with it).
BURST_BYTES = 16 * MIB


def forged(index: int, size: int) -> bytes:
    """A completion of a call nobody has, ``size`` bytes long, in the form workers use."""
    head = json.dumps(
        {"call_id": f"call_{index:032x}", "result": {"pad": ""}}, separators=(",", ":")
    )
    return (head[:-3] + "x" * (size - len(head)) + head[-3:]).encode()


def read_by_the_listener(client: redis.Redis, db: int) -> None:
    """Until the API's subscription has no output waiting in Redis: it has read it all."""
    deadline = time.monotonic() + 60
    while True:
        listeners = [c for c in client.client_list() if int(c["sub"]) > 0 and int(c["db"]) == db]
        if listeners and all(int(c["omem"]) == 0 for c in listeners):
            return
        assert time.monotonic() < deadline, listeners
        time.sleep(0.05)


def test_a_flood_of_forged_completions_does_not_fill_the_api_memory(stack: Stack) -> None:
    api = psutil.Process(stack.processes["api"].pid)
    channel = Namespace.of(stack.settings).key(CALL_DONE_CHANNEL)
    before = api.memory_info().rss
    published = 0
    with redis_client(stack) as client:
        db = int(client.connection_pool.connection_kwargs.get("db", 0))
        # Larger than any a worker sends, then the largest size a worker sends.
        for size, count in ((MIB, 200), (60 * 1024, 1500)):
            per_burst = max(1, BURST_BYTES // size)
            for start in range(0, count, per_burst):
                pipe = client.pipeline(transaction=False)
                for index in range(start, min(count, start + per_burst)):
                    pipe.publish(channel, forged(published + index, size))
                pipe.execute()
                read_by_the_listener(client, db)
            published += count
    grown = (api.memory_info().rss - before) / MIB

    print(f"{published} forged completions, 288 MiB in all: the API grew {grown:.0f} MiB")
    assert grown < 100
    done = submit(stack, "echo", {"after": "flood"}, wait_s=30)
    assert (done["status"], done["value"]) == ("succeeded", {"after": "flood"}), done
