"""A batch's calls wait behind other calls (``run_message.Precedence``): a real worker takes
every message that is not a batch's first, whatever was queued before it, so an agent's
call does not wait for another agent's batch to be worked off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from router.dispatch.batches import BatchService
from router.messaging.namespace import Namespace

from ..support.faults import PrivateStack, ledger_runs, private_stack_in, start_worker
from ..support.launcher import stop_group
from ..support.waiting import wait_for

BATCH_CALLS = 40


@pytest.fixture
def private(tmp_path: Path) -> Iterator[PrivateStack]:
    with private_stack_in(tmp_path) as stack:
        yield stack


def test_a_call_queued_after_a_batch_runs_before_the_batch(
    private: PrivateStack, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    runtime = private.runtime
    batches = BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock)
    items = [{"tool": "ledger", "args": {"path": str(ledger), "n": n}} for n in range(BATCH_CALLS)]
    receipt = batches.submit("agent", items)
    assert receipt.total == BATCH_CALLS and not receipt.rejected
    lone = private.submit_ledger(ledger, BATCH_CALLS)

    broker = redis.Redis.from_url(private.redis.url)
    try:
        first, *_, last = runtime.namespace.queue_keys("tools.low")
        batch_messages = int(broker.llen(last))
        # The lone call's message is in the queue's first list, the batch's in its last,
        # and the queue's depth counts both.
        assert broker.llen(first) == 1 and batch_messages > 1
        depths = runtime.namespace.queue_depths(broker, ["tools.low", "tools.high"])
        assert depths == {"tools.low": 1 + batch_messages, "tools.high": 0}
    finally:
        broker.close()

    worker = start_worker(private.env, tmp_path / "worker.log")
    try:
        wait_for(lambda: len(ledger_runs(ledger)) == BATCH_CALLS + 1, 60, "every call to have run")
    finally:
        stop_group(worker)
    order = [line.split()[0] for line in ledger.read_text(encoding="utf-8").splitlines()]
    assert order[0] == lone, order.index(lone)


def test_the_queue_lists_are_kombus_priority_lists() -> None:
    from kombu.transport import redis as kombu_redis

    keys = Namespace("ns").queue_keys("tools.low")
    channel = kombu_redis.Channel
    assert keys == tuple(
        "ns:" + ("tools.low" if not step else f"tools.low{channel.sep}{step}")
        for step in kombu_redis.PRIORITY_STEPS
    )
