"""The MCP task ledger keeps a key's tasks only while they can be read: a key's new task
deletes its tasks past their TTL whose calls finished a while ago. Real SQLite and
PostgreSQL."""

from __future__ import annotations

from sqlalchemy import func, select, update

from router.clock import FakeClock
from router.db.schema import calls, mcp_tasks
from router.dispatch.submission import Submission
from router.mcp.task_ledger import FINISHED_KEPT_MS, PRUNE_WINDOW, TaskLedger
from router.runtime import Runtime
from router.status import CallStatus


def submitted(runtime: Runtime, count: int) -> list[str]:
    results = runtime.dispatcher.submit_many(
        [Submission("agent", "echo", {"i": i}, None) for i in range(count)]
    )
    return [str(r.call_id) for r in results]


def finish(runtime: Runtime, call_ids: list[str], at: int) -> None:
    with runtime.store.transaction() as conn:
        conn.execute(
            update(calls)
            .where(calls.c.id.in_(call_ids))
            .values(status=str(CallStatus.SUCCEEDED), updated_at=at)
        )


def ledger_rows(runtime: Runtime, owner: str) -> int:
    with runtime.store.reading() as conn:
        query = select(func.count()).select_from(mcp_tasks).where(mcp_tasks.c.owner == owner)
        return int(conn.execute(query).scalar_one())


def test_a_new_task_deletes_the_keys_tasks_that_can_no_longer_be_read(
    runtime: Runtime, clock: FakeClock
) -> None:
    ledger = TaskLedger(runtime.store, clock)
    done, working, others, first_new, second_new = submitted(runtime, 5)
    ledger.add("agent", done, 1000)
    ledger.add("agent", working, 1000)
    ledger.add("other", others, 1000)
    finish(runtime, [done, others], clock())
    clock.advance(1000)

    # Past its TTL but finished just now: a tasks/result that waited on it reads it still.
    ledger.add("agent", first_new, 60_000)
    assert ledger.owned("agent", done) is not None

    clock.advance(FINISHED_KEPT_MS)
    ledger.add("agent", second_new, 60_000)
    assert ledger.owned("agent", done) is None
    # Past its TTL but still working: readable, so kept.
    assert ledger.owned("agent", working) is not None
    # Another key's tasks go with that key's own next task, not with this one's.
    assert ledger.owned("other", others) is not None
    assert ledger_rows(runtime, "agent") == 3
    entries, _ = ledger.page("agent", None, 10)
    assert {entry.task_id for entry in entries} == {working, first_new, second_new}


def test_stale_tasks_are_deleted_a_bounded_number_at_a_time(
    runtime: Runtime, clock: FakeClock
) -> None:
    ledger = TaskLedger(runtime.store, clock)
    stale = submitted(runtime, PRUNE_WINDOW + 20)
    for task_id in stale:
        ledger.add("agent", task_id, 1000)
    finish(runtime, stale, clock())
    clock.advance(1000 + FINISHED_KEPT_MS)
    first, second = submitted(runtime, 2)

    ledger.add("agent", first, 60_000)
    # One window of them at most, wherever the key's windows had got to.
    assert ledger_rows(runtime, "agent") >= len(stale) + 1 - PRUNE_WINDOW
    ledger.add("agent", second, 60_000)
    assert ledger_rows(runtime, "agent") == 2


def test_tasks_that_stay_readable_do_not_hold_back_the_stale_ones_behind_them(
    runtime: Runtime, clock: FakeClock
) -> None:
    ledger = TaskLedger(runtime.store, clock)
    # The key's oldest tasks: granted a day and still working, readable throughout.
    readable = submitted(runtime, PRUNE_WINDOW)
    for task_id in readable:
        ledger.add("agent", task_id, 86_400_000)
        clock.advance(1)
    stale = submitted(runtime, 20)
    for task_id in stale:
        ledger.add("agent", task_id, 1000)
        clock.advance(1)
    finish(runtime, stale, clock())
    clock.advance(1000 + FINISHED_KEPT_MS)

    for task_id in submitted(runtime, 3):
        ledger.add("agent", task_id, 60_000)
    assert all(ledger.owned("agent", task_id) is None for task_id in stale)
    assert all(ledger.owned("agent", task_id) is not None for task_id in readable)
    assert ledger_rows(runtime, "agent") == PRUNE_WINDOW + 3
