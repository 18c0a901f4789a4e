"""A tool's rate limit lives in Redis (SPEC §16: not trusted). Someone holding Redis can
write its token bucket, but a bucket they wrote holds the tool's calls back no longer
than one token takes: over the limit a call waits (SPEC §10), it is never parked for years
where the reconciler does not look. And the bucket is whole again after one call, neither
stuck in debt nor with its limit gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.constants import RATE_BUCKET
from router.messaging.namespace import Namespace

from ..support.audit import audit_events
from ..support.redis_attacker import redis_client, submit
from ..support.stack import Stack

# ``limited_ledger`` allows 2 calls a second: one token takes half a second.
TOOL, CAPACITY = "limited_ledger", 2


@pytest.mark.parametrize(
    ("tokens", "ahead_ms"),
    [("-2e9", 0), ("0", 10**12), ("-inf", 0)],
    ids=["deep-in-debt", "taken-in-the-future", "minus-infinity"],
)
def test_a_planted_bucket_holds_a_call_back_no_longer_than_one_token(
    stack: Stack, tmp_path: Path, tokens: str, ahead_ms: int
) -> None:
    bucket = f"{Namespace.of(stack.settings).prefix}{RATE_BUCKET}:{TOOL}"
    ledger = tmp_path / "ledger"
    with redis_client(stack) as client:
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        client.hset(bucket, mapping={"tokens": tokens, "ts": now_ms + ahead_ms})
        try:
            done = submit(stack, TOOL, {"path": str(ledger)}, wait_s=20)
            left = float(client.hget(bucket, "tokens") or 0)
        finally:
            client.delete(bucket)

    print(f"bucket planted with {tokens} tokens, {ahead_ms} ms ahead: call {done['status']}")
    assert done["status"] == "succeeded", done
    assert ledger.read_text().count("\n") == 1
    assert [event for event, _ in audit_events(stack, done["call_id"])] == ["queued", "ok"]
    assert 0 <= left <= CAPACITY
