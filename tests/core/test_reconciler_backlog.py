"""The reconciler behind queued calls it cannot publish: calls of a tool no longer in its
configuration (removed, renamed, or a worker on an older config) never take the places of
the calls it can."""

from __future__ import annotations

import redis
from sqlalchemy import select, update

from approvals.gate import Gate
from router.clock import FakeClock
from router.db.schema import calls
from router.dispatch.batches import BatchService
from router.runtime import Runtime
from workers.execution import Executor

from ..support.calls import queue_call


def test_calls_of_a_retired_tool_do_not_keep_the_reconciler_from_the_rest(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    retired = [queue_call(runtime, "echo", {"n": n}) for n in range(5)]
    with runtime.store.transaction() as conn:
        conn.execute(update(calls).where(calls.c.id.in_(retired)).values(tool="retired_tool"))
    clock.advance(1)
    lost = queue_call(runtime, "echo", {"n": "lost"})
    broker = redis.Redis.from_url(runtime.redis_url)
    queue = runtime.namespace.prefix + "tools.low"
    broker.delete(queue)  # Redis lost every message
    clock.advance(int(runtime.settings.requeue_after_s * 1000) + 1)

    # A pass reads fewer calls than the retired ones: they must not fill it.
    assert executor.reconcile(limit=3) == 1
    assert broker.llen(queue) == 1
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, lost)
        kept = [runtime.store.get(conn, call_id) for call_id in retired]
    assert row is not None and row.published_at == clock()
    # The retired tool's calls stay queued, as they were: nothing of them is lost.
    assert {(r.status, r.tool) for r in kept if r is not None} == {("queued", "retired_tool")}
    broker.close()


def test_a_released_batch_call_sent_again_keeps_its_place_ahead_of_batches(
    runtime: Runtime, executor: Executor, clock: FakeClock
) -> None:
    runtime.keys.create("approver", ["approver"])
    receipt = BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock).submit(
        "agent", [{"tool": "high_echo", "args": {"n": 1}}]
    )
    with runtime.store.reading() as conn:
        (call_id, request_id) = conn.execute(
            select(calls.c.id, calls.c.request_id).where(calls.c.batch_id == receipt.batch_id)
        ).one()
    assert Gate(runtime, runtime.notifier()).decide(request_id, "approver", "approve").released
    broker = redis.Redis.from_url(runtime.redis_url)
    first, *_, last = runtime.namespace.queue_keys("tools.high")
    # Released, it went ahead of batches; then Redis lost the message.
    assert (broker.llen(first), broker.llen(last)) == (1, 0)
    broker.delete(first)
    clock.advance(int(runtime.settings.requeue_after_s * 1000) + 1)
    assert executor.reconcile(limit=10) == 1
    assert (broker.llen(first), broker.llen(last)) == (1, 0), call_id
    broker.close()
