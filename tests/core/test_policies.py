"""Execution policies on real Redis and both databases: retries, rate limits, caching."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from router.clock import FakeClock
from router.constants import RESULT_CACHE
from router.db.schema import calls
from router.dispatch.batches import BatchService
from router.messaging.policies import CLOCK_SKEW_MS
from router.runtime import Runtime
from router.tools import stats
from router.tools.config import parse_rate
from router.trust.keyring import Purpose
from workers.execution import Executor

from ..support.audit import call_audit_rows
from ..support.calls import queue_call
from ..support.stack import Stack


def executor(runtime: Runtime, name: str = "test-worker") -> Executor:
    return Executor(runtime, runtime.notifier(), actor=name)


def test_a_retryable_failure_is_retried_with_backoff_then_fails_with_the_last_error(
    runtime: Runtime,
) -> None:
    call_id = queue_call(runtime, "flaky", {})
    worker = executor(runtime)
    assert [worker.run(call_id, "flaky") for _ in range(3)] == ["retry", "retry", "error"]
    row = runtime.calls.read(call_id)
    assert (row.status, row.attempt, row.error) == ("failed", 3, "flaky on attempt 3")
    rows = call_audit_rows(runtime, call_id)
    assert [r["event"] for r in rows] == ["queued", "retry", "retry", "error"]
    delays = [r["detail"]["delay_s"] for r in rows if r["event"] == "retry"]  # type: ignore[index]
    assert all(0 < d <= 0.05 for d in delays)
    # Each retry went back to the tool's queue with a delay (an ETA message).
    assert redis.Redis.from_url(runtime.redis_url).llen(runtime.namespace.prefix + "tools.low") == 3


def test_a_retried_call_that_then_succeeds_ends_ok(runtime: Runtime) -> None:
    call_id = queue_call(runtime, "flaky", {"succeed_on": 2})
    worker = executor(runtime)
    assert [worker.run(call_id, "flaky") for _ in range(2)] == ["retry", "ok"]
    assert runtime.calls.read(call_id).result().to_dict()["value"] == {"attempt": 2}


def test_retry_after_is_honoured(runtime: Runtime) -> None:
    call_id = queue_call(runtime, "flaky", {"retry_after_s": 5})
    assert executor(runtime).run(call_id, "flaky") == "retry"
    retry = next(r for r in call_audit_rows(runtime, call_id) if r["event"] == "retry")
    assert retry["detail"]["delay_s"] >= 5  # type: ignore[index]


def test_only_retryable_failures_within_the_budget_are_retried(runtime: Runtime) -> None:
    for tool in ("flaky_once", "value_error"):
        call_id = queue_call(runtime, tool, {})
        assert executor(runtime).run(call_id, tool) == "error"
        assert "retry" not in [r["event"] for r in call_audit_rows(runtime, call_id)]


def test_identical_arguments_within_the_ttl_return_the_cached_value(
    runtime: Runtime, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    first = queue_call(runtime, "cached_ledger", {"path": str(ledger)})
    second = queue_call(runtime, "cached_ledger", {"path": str(ledger)})
    other = queue_call(runtime, "cached_ledger", {"path": str(ledger), "x": 1})
    worker = executor(runtime)
    assert [worker.run(c, "cached_ledger") for c in (first, second, other)] == ["ok"] * 3
    assert len(ledger.read_text().splitlines()) == 2
    assert runtime.calls.read(second).value == runtime.calls.read(first).value
    ok_row = next(r for r in call_audit_rows(runtime, second) if r["event"] == "ok")
    assert ok_row["detail"] == {"attempt": 1, "cached": True}
    # The cached answer ran nothing, so it costs nothing, in every place cost is summed.
    requester = runtime.calls.read(first).requested_by
    with runtime.store.reading() as conn:
        shown = stats.tool_stats(conn, runtime.registry, "cached_ledger")
        spent = stats.cost_by_key(conn, runtime.registry)
    assert (shown["calls"], shown["by_status"], shown["cost"]) == (3, {"succeeded": 3}, 1.0)
    assert spent == {requester: 1.0}


CACHE_LOGGER = "router.messaging.policies"
REFUSED_ENTRY = "a cached result of cached_ledger did not verify or is out of date"


def cache_entry(runtime: Runtime, call_id: str) -> str:
    """The Redis key of the cache entry a call of ``cached_ledger`` reads and writes."""
    digest = runtime.calls.read(call_id).args_sha256
    return runtime.namespace.key(RESULT_CACHE, "cached_ledger", digest)


def ran_not_cached(runtime: Runtime, call_id: str) -> bool:
    ok_row = next(r for r in call_audit_rows(runtime, call_id) if r["event"] == "ok")
    return "cached" not in ok_row["detail"]


def test_a_cache_entry_written_back_after_its_ttl_is_not_an_answer(
    runtime: Runtime, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    args = {"path": str(tmp_path / "ledger")}
    worker = executor(runtime)
    first = queue_call(runtime, "cached_ledger", args)
    assert worker.run(first, "cached_ledger") == "ok"
    client = redis.Redis.from_url(runtime.redis_url)
    key = cache_entry(runtime, first)
    copied = client.get(key)
    assert copied is not None
    # The TTL passes and Redis drops the entry; whoever can write to Redis puts the copy
    # back, with no expiry.
    tool = runtime.registry.get("cached_ledger")
    assert tool is not None
    replays = []
    # Just expired, it might be an honest entry read by a clock a little ahead: a quiet
    # miss. Past what clocks may differ by, it is counted as planted.
    for advance in (int(tool.spec.cache_ttl_s * 1000), CLOCK_SKEW_MS):
        clock.advance(advance)
        client.delete(key)
        client.set(key, copied)
        replays.append(queue_call(runtime, "cached_ledger", args))
        with caplog.at_level(logging.WARNING, logger=CACHE_LOGGER):
            assert worker.run(replays[-1], "cached_ledger") == "ok"
    assert len((tmp_path / "ledger").read_text().splitlines()) == 3
    assert all(ran_not_cached(runtime, replayed) for replayed in replays)
    assert [r.getMessage() for r in caplog.records] == [REFUSED_ENTRY]
    client.close()


def test_a_cache_entry_signed_to_outlive_the_tools_ttl_is_a_quiet_miss(
    runtime: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As a worker wrote it while the config gave the tool a longer TTL than it has now:
    not an answer, and no alarm (only toolrouter signs)."""
    args = {"path": str(tmp_path / "ledger")}
    worker = executor(runtime)
    call_id = queue_call(runtime, "cached_ledger", args)
    tool = runtime.registry.get("cached_ledger")
    assert tool is not None
    ttl_s = tool.spec.cache_ttl_s * 2 + CLOCK_SKEW_MS / 1000
    longer = replace(tool, spec=tool.spec.model_copy(update={"cache_ttl_s": ttl_s}))
    digest = runtime.calls.read(call_id).args_sha256
    worker.calls.cache.put(longer, digest, json.dumps({"pid": -1}))
    with caplog.at_level(logging.WARNING, logger=CACHE_LOGGER):
        assert worker.run(call_id, "cached_ledger") == "ok"
    assert runtime.calls.read(call_id).result().to_dict()["value"] == {"pid": os.getpid()}
    assert ran_not_cached(runtime, call_id)
    assert caplog.records == []


def test_a_cache_entry_from_before_entries_carried_their_expiry_is_a_plain_miss(
    runtime: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = {"path": str(tmp_path / "ledger")}
    call_id = queue_call(runtime, "cached_ledger", args)
    digest = runtime.calls.read(call_id).args_sha256
    value = json.dumps({"pid": -1})
    tag = runtime.keyring.sign(Purpose.COMPLETION, f"cached_ledger|{digest}|{value}")
    client = redis.Redis.from_url(runtime.redis_url)
    client.set(cache_entry(runtime, call_id), f"{tag}|{value}", ex=60)
    client.close()
    with caplog.at_level(logging.WARNING, logger=CACHE_LOGGER):
        assert executor(runtime).run(call_id, "cached_ledger") == "ok"
    assert runtime.calls.read(call_id).result().to_dict()["value"] == {"pid": os.getpid()}
    assert ran_not_cached(runtime, call_id)
    assert caplog.records == []  # not counted as tampering


def test_over_the_rate_limit_a_call_waits_and_the_bucket_is_shared(
    runtime: Runtime, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    calls = [queue_call(runtime, "limited_ledger", {"path": str(ledger), "i": i}) for i in range(3)]
    redis.Redis.from_url(runtime.redis_url).delete("toolrouter:bucket:limited_ledger")
    one, two = executor(runtime, "worker-1"), executor(runtime, "worker-2")
    assert one.run(calls[0], "limited_ledger") == "ok"
    assert two.run(calls[1], "limited_ledger") == "ok"
    # The bucket holds 2 and both workers drew from it: the third call waits.
    assert one.run(calls[2], "limited_ledger") == "deferred"
    row = runtime.calls.read(calls[2])
    assert row.status == "queued" and row.attempt == 0
    assert len(ledger.read_text().splitlines()) == 2


def test_a_batchs_call_held_back_by_a_rate_limit_still_waits_behind_other_calls(
    runtime: Runtime, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    items = [{"tool": "limited_ledger", "args": {"path": str(ledger), "i": i}} for i in range(3)]
    receipt = BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock).submit(
        "agent", items
    )
    with runtime.store.reading() as conn:
        ids = [
            row.id
            for row in conn.execute(
                select(calls.c.id)
                .where(calls.c.batch_id == receipt.batch_id)
                .order_by(calls.c.batch_index)
            )
        ]
    broker = redis.Redis.from_url(runtime.redis_url)
    first, *_, last = runtime.namespace.queue_keys("tools.low")
    broker.delete(first, last)  # the batch's own messages
    worker = executor(runtime)
    assert [worker.run(call_id, "limited_ledger") for call_id in ids] == ["ok", "ok", "deferred"]
    # Sent back with its countdown into the batch's list, not ahead of agents' calls.
    assert (broker.llen(first), broker.llen(last)) == (0, 1)
    broker.close()


def test_in_a_shared_message_each_call_of_a_rate_limited_tool_asks_the_limiter(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Calls of one message are otherwise claimed with the outcome of the call before them;
    a rate-limited tool's are not, so the third one here waits instead of running."""
    ledger = tmp_path / "ledger"
    calls = [queue_call(runtime, "limited_ledger", {"path": str(ledger), "i": i}) for i in range(3)]
    redis.Redis.from_url(runtime.redis_url).delete("toolrouter:bucket:limited_ledger")
    assert executor(runtime).run_many(calls, "limited_ledger") == ["ok", "ok", "deferred"]
    row = runtime.calls.read(calls[2])
    assert row.status == "queued" and row.attempt == 0
    assert len(ledger.read_text().splitlines()) == 2


def test_rate_limits_parse_or_fail_at_registration() -> None:
    assert parse_rate("10/s") == (10, 10)
    assert parse_rate("6/m") == (6, 0.1)
    for bad in ("10", "0/s", "ten/s", "5/fortnight"):
        with pytest.raises(ValueError):
            parse_rate(bad)


def test_the_deferred_call_runs_once_the_bucket_refills(
    runtime: Runtime, tmp_path: Path, clock: FakeClock
) -> None:
    ledger = tmp_path / "ledger"
    redis.Redis.from_url(runtime.redis_url).delete("toolrouter:bucket:limited_ledger")
    calls = [queue_call(runtime, "limited_ledger", {"path": str(ledger), "i": i}) for i in range(3)]
    worker = executor(runtime)
    outcomes = [worker.run(c, "limited_ledger") for c in calls]
    assert outcomes == ["ok", "ok", "deferred"]
    # The bucket refills in Redis time (2 tokens a second): poll with a deadline.
    import time

    deadline = time.monotonic() + 5
    while worker.run(calls[2], "limited_ledger") == "deferred":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert runtime.calls.read(calls[2]).status == "succeeded"


def test_a_real_worker_retries_after_the_backoff_and_succeeds(stack: Stack) -> None:
    with stack.client("agent") as http:
        result = http.post(
            "/v1/calls", json={"tool": "flaky", "args": {"succeed_on": 3}, "wait_s": 30}
        ).json()
        assert result["status"] == "succeeded", result
        assert result["value"] == {"attempt": 3}
    with stack.client("operator") as http:
        rows = http.get("/v1/audit", params={"call_id": result["call_id"]}).json()["rows"]
    assert [row["event"] for row in rows] == ["queued", "retry", "retry", "ok"]
