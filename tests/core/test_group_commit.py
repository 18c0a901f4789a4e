"""Group commit (``Dispatcher.submit_many``, ``router.dispatch.group_commit``): calls submitted
together share a transaction and a publish, and each is answered, stored and audited
exactly as it would be alone. Real database (both backends), real Redis."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from sqlalchemy import func, select

from router import AsyncClient
from router.api.app import create_app
from router.cli.privredis import free_port
from router.db.engine import make_engine
from router.db.schema import audit_log, calls
from router.db.store import Store
from router.dispatch.dispatcher import Dispatcher
from router.dispatch.group_commit import GroupCommit
from router.dispatch.in_flight import InFlight
from router.dispatch.submission import Submission
from router.messaging.celery_app import make_celery
from router.messaging.namespace import Namespace
from router.messaging.publisher import Publisher
from router.results import CallResult
from router.runtime import Runtime

from ..stack.test_mcp_server import mcp_session
from ..support.faults import private_stack_in
from ..support.stack import Stack

WAIT_S = 30


def audit_rows(runtime: Runtime) -> list[tuple[str, str | None, str | None]]:
    with runtime.store.reading() as conn:
        rows = conn.execute(
            select(audit_log.c.event, audit_log.c.tool, audit_log.c.call_id).order_by(
                audit_log.c.seq
            )
        ).all()
    return [(row.event, row.tool, row.call_id) for row in rows]


def call_count(runtime: Runtime) -> int:
    with runtime.store.reading() as conn:
        return int(conn.execute(select(func.count()).select_from(calls)).scalar_one())


def queued_messages(runtime: Runtime, queue: str = "tools.low") -> list[bytes]:
    client = redis.Redis.from_url(runtime.redis_url)
    try:
        return list(client.lrange(runtime.namespace.prefix + queue, 0, -1))
    finally:
        client.close()


MIXED = [
    Submission("agent", "echo", {"n": 1}),
    Submission("agent", "no-such-tool", {}),
    Submission("agent", "strict", {"to": 1}),
    Submission("agent", "echo", {"big": "x" * 300_000}),
    Submission("agent", "high_echo", {"n": 2}),
    Submission("agent", "echo", {"n": 3}, "key-1"),
    Submission("agent", "echo", {"n": 3}, "key-1"),
    Submission("agent", "echo", {"n": 4}, "key-1"),
    Submission("agent2", "echo", {"n": 5}),
]


def test_a_group_answers_each_call_as_it_would_be_answered_alone(runtime: Runtime) -> None:
    results = runtime.dispatcher.submit_many(MIXED)

    accepted, unknown, invalid, too_large, gated, keyed, replay, conflict, other = results
    assert (accepted.status, accepted.tool, accepted.http_status) == ("queued", "echo", 200)
    assert (unknown.status, unknown.error) == ("rejected", "unknown tool: no-such-tool")
    assert invalid.status == "rejected" and str(invalid.error).startswith("invalid arguments")
    assert too_large.http_status == 413
    assert gated.status == "pending" and gated.request_id is not None
    assert keyed.status == "queued"
    assert replay.call_id == keyed.call_id
    assert (conflict.status, conflict.http_status) == ("conflict", 409)
    assert other.status == "queued"
    accepted_ids = [r.call_id for r in (accepted, gated, keyed, other)]
    assert len(set(accepted_ids)) == 4 and None not in accepted_ids

    # Stored with the right owner and tool, each with its own audit row; the keyed ones go
    # one by one, after the group's shared transaction.
    for result, owner in ((accepted, "agent"), (gated, "agent"), (other, "agent2")):
        assert result.call_id is not None
        row = runtime.calls.read(result.call_id)
        assert (row.requested_by, row.tool, row.status) == (owner, result.tool, result.status)
    assert call_count(runtime) == 4
    assert audit_rows(runtime) == [
        ("queued", "echo", accepted.call_id),
        ("unknown", "no-such-tool", None),
        ("invalid", "strict", None),
        ("pending", "high_echo", gated.call_id),
        ("queued", "echo", other.call_id),
        ("queued", "echo", keyed.call_id),
    ]
    # One message per ungated accepted call, none for the gated one.
    messages = queued_messages(runtime)
    for call_id in (accepted.call_id, keyed.call_id, other.call_id):
        assert sum(str(call_id).encode() in m for m in messages) == 1
    assert not any(str(gated.call_id).encode() in m for m in messages)


def test_a_group_whose_publish_fails_fails_each_accepted_call(runtime: Runtime) -> None:
    dead = Publisher(make_celery(f"redis://127.0.0.1:{free_port()}/0", runtime.namespace))
    dispatcher = Dispatcher(
        runtime.store, runtime.registry, dead, runtime.audit, runtime.keyring, clock=runtime.clock
    )

    first, unknown, second = dispatcher.submit_many(
        [
            Submission("agent", "echo", {"n": 1}),
            Submission("agent", "no-such-tool", {}),
            Submission("agent", "echo", {"n": 2}),
        ]
    )

    assert unknown.status == "rejected"
    for result in (first, second):
        assert result.http_status == 503
        assert str(result.error).startswith("unavailable: broker: ")
    # Stored, then failed on the spot, as a single submission is: nothing runs later.
    events = [event for event, _, _ in audit_rows(runtime)]
    assert events == ["queued", "unknown", "queued", "error", "error"]
    with runtime.store.reading() as conn:
        statuses = conn.execute(select(calls.c.status)).scalars().all()
    assert sorted(statuses) == ["failed", "failed"]


def test_a_group_on_a_database_that_is_down_is_unavailable_for_every_call(
    runtime: Runtime,
) -> None:
    engine = make_engine(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing")
    dispatcher = Dispatcher(
        Store(engine), runtime.registry, runtime.publisher, runtime.audit, runtime.keyring
    )
    try:
        results = dispatcher.submit_many(MIXED)
    finally:
        engine.dispose()
    by_status = {(r.status, r.http_status) for r in results}
    # Only the request too large is refused before the database is needed.
    assert by_status == {("unavailable", 503), ("bad_request", 413)}
    assert all(
        str(r.error).startswith("unavailable: database: ") for r in results if r.http_status == 503
    )
    assert queued_messages(runtime) == []


def test_a_group_that_fails_unexpectedly_is_submitted_one_by_one(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    dispatcher = runtime.dispatcher
    store_new = dispatcher.store_new

    def refuse_groups(conn: Any, new: Sequence[Any], entries: Sequence[Any], *, at: int) -> None:
        if len(entries) > 1:
            raise RuntimeError("a bug that only groups hit")
        store_new(conn, new, entries, at=at)

    monkeypatch.setattr(dispatcher, "store_new", refuse_groups)
    items = [
        Submission("agent", "echo", {"n": 1}),
        Submission("agent", "no-such-tool", {}),
        Submission("agent", "echo", {"n": 2}),
    ]

    first, unknown, second = dispatcher.submit_many(items)

    assert (first.status, unknown.status, second.status) == ("queued", "rejected", "queued")
    # Nothing of the failed group was kept, and nothing is doubled: one call and one audit
    # row for each accepted call, one audit row for the rejection.
    assert call_count(runtime) == 2
    assert audit_rows(runtime) == [
        ("queued", "echo", first.call_id),
        ("unknown", "no-such-tool", None),
        ("queued", "echo", second.call_id),
    ]


def test_one_call_failing_after_the_commit_fails_alone(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis refuses the group's messages, and failing one of the calls then breaks in
    an unexpected way: that call is answered 503, the others as usual."""
    dead = Publisher(make_celery(f"redis://127.0.0.1:{free_port()}/0", runtime.namespace))
    dispatcher = Dispatcher(
        runtime.store, runtime.registry, dead, runtime.audit, runtime.keyring, clock=runtime.clock
    )
    fail_unpublished = dispatcher._fail_unpublished
    broken: list[str] = []

    def breaks_once(actor: str, tool: str, call_id: str, error: str) -> CallResult:
        if not broken:
            broken.append(call_id)
            raise RuntimeError("a bug on one call")
        return fail_unpublished(actor, tool, call_id, error)

    monkeypatch.setattr(dispatcher, "_fail_unpublished", breaks_once)

    first, unknown, second = dispatcher.submit_many(
        [
            Submission("agent", "echo", {"n": 1}),
            Submission("agent", "no-such-tool", {}),
            Submission("agent", "echo", {"n": 2}),
        ]
    )

    assert (first.status, first.tool, first.error) == (
        "unavailable",
        "echo",
        "unavailable: internal error (RuntimeError)",
    )
    assert (unknown.status, unknown.http_status) == ("rejected", 200)
    assert second.http_status == 503 and str(second.error).startswith("unavailable: broker: ")


def test_an_unpublished_call_a_worker_claimed_anyway_is_answered_as_it_stands(
    runtime: Runtime,
) -> None:
    """The publish reported an error after the message had gone out, and a worker took
    the call: the caller is told where the call stands, not 503 for a call that runs."""
    dispatcher = runtime.dispatcher
    accepted = dispatcher.submit("agent", "echo", {"n": 1})
    assert accepted.call_id is not None
    with runtime.store.transaction() as conn:
        assert runtime.store.claim(conn, accepted.call_id, now=runtime.clock(), lease_ms=60_000)

    answer = dispatcher._fail_unpublished("agent", "echo", accepted.call_id, "broker: gone")

    assert (answer.status, answer.http_status, answer.call_id) == (
        "running",
        200,
        accepted.call_id,
    )
    assert runtime.calls.read(accepted.call_id).status == "running"


class CountingDispatcher:
    """The real dispatcher, with the size of every group it is given written down."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher, self.groups = dispatcher, []  # type: tuple[Dispatcher, list[int]]

    def submit_many(self, items: Sequence[Submission]) -> list[CallResult]:
        self.groups.append(len(items))
        return self.dispatcher.submit_many(items)

    def submit(self, *args: Any) -> CallResult:
        return self.dispatcher.submit(*args)


def test_keyed_calls_do_not_wait_in_groups(runtime: Runtime) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = GroupCommit(lambda: counting)  # type: ignore[arg-type,return-value]

    async def scenario() -> list[CallResult]:
        return await asyncio.gather(
            *(
                group_commit.submit(Submission("agent", "echo", {"i": i}, f"key-{i % 3}"))
                for i in range(6)
            )
        )

    results = asyncio.run(scenario())

    assert counting.groups == []
    # Three keys, each used twice with other arguments: one call each, and 409s.
    assert sorted(r.http_status for r in results) == [200, 200, 200, 409, 409, 409]
    assert call_count(runtime) == 3


def one_after_another(group_commit: GroupCommit, count: int) -> list[CallResult]:
    """``count`` echo calls by one caller, each submitted once the last is answered."""

    async def scenario() -> list[CallResult]:
        return [
            await asyncio.wait_for(
                group_commit.submit(Submission("agent", "echo", {"i": i})), timeout=30
            )
            for i in range(count)
        ]

    return asyncio.run(scenario())


def test_one_caller_after_another_is_answered_each_time(runtime: Runtime) -> None:
    """Each submission comes just after the last drain task finished (its answer wakes the
    caller before the task's end is handled): a new task must take it."""
    group_commit = GroupCommit(lambda: runtime.dispatcher)
    assert [r.status for r in one_after_another(group_commit, 5)] == ["queued"] * 5
    assert call_count(runtime) == 5


def test_a_shutdown_leaves_no_caller_hanging(runtime: Runtime) -> None:
    group_commit = GroupCommit(lambda: runtime.dispatcher)

    async def scenario() -> list[CallResult]:
        callers = [
            asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"i": i})))
            for i in range(5)
        ]
        await asyncio.sleep(0)  # all queued, the drain task started
        loop = asyncio.get_running_loop()
        drain = group_commit._queues[loop].draining
        assert drain is not None
        drain.cancel()  # as the loop's shutdown would
        return await asyncio.wait_for(asyncio.gather(*callers), timeout=30)

    results = asyncio.run(scenario())

    assert {r.status for r in results} == {"unavailable"}
    assert {r.http_status for r in results} == {503}


def test_concurrent_submissions_share_transactions_and_each_gets_its_own_answer(
    runtime: Runtime,
) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = GroupCommit(lambda: counting, max_group=16)  # type: ignore[arg-type,return-value]

    async def scenario() -> list[CallResult]:
        return await asyncio.gather(
            *(group_commit.submit(Submission("agent", "echo", {"i": i})) for i in range(40))
        )

    results = asyncio.run(scenario())

    assert all(r.status == "queued" for r in results)
    assert len({r.call_id for r in results}) == 40
    # Each answer is its own call's: the stored arguments are the ones that caller sent.
    for i, result in enumerate(results):
        assert result.call_id is not None
        assert runtime.calls.read(result.call_id).arguments == {"i": i}
    assert sum(counting.groups) == 40
    assert max(counting.groups) <= 16
    assert len(counting.groups) < 40, counting.groups  # they did share


def test_a_caller_that_goes_away_still_has_its_call_submitted(runtime: Runtime) -> None:
    group_commit = GroupCommit(lambda: runtime.dispatcher)

    async def scenario() -> CallResult:
        gone = asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"n": 1})))
        await asyncio.sleep(0)  # queued
        gone.cancel()
        # A later submission is answered after the group before it, the abandoned one's.
        return await group_commit.submit(Submission("agent", "echo", {"n": 2}))

    after = asyncio.run(scenario())

    assert after.status == "queued"
    assert call_count(runtime) == 2


def test_concurrent_calls_over_http_are_answered_each_with_its_own_outcome(
    stack: Stack,
) -> None:
    """A mix of good and bad calls in flight at once through the API: every caller gets
    the answer to its own call."""

    async def scenario() -> list[CallResult]:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            calls_: list[Any] = []
            for i in range(30):
                if i % 3 == 0:
                    calls_.append(agent.call("echo", {"i": i}, wait_s=WAIT_S))
                elif i % 3 == 1:
                    calls_.append(agent.call("strict", {"to": i}, wait_s=WAIT_S))
                else:
                    calls_.append(agent.call("no-such-tool", {"i": i}, wait_s=WAIT_S))
            return list(await asyncio.gather(*calls_))

    results = asyncio.run(scenario())

    for i, result in enumerate(results):
        if i % 3 == 0:
            assert (result.status, result.value) == ("succeeded", {"i": i})
        elif i % 3 == 1:
            assert (result.status, result.tool) == ("rejected", "strict")
        else:
            assert (result.status, result.error) == ("rejected", "unknown tool: no-such-tool")


# -- holding a small group while the workers are busy (router.dispatch.in_flight) -----------


class Ticks:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_in_flight_counts_published_calls_until_they_finish_or_are_forgotten() -> None:
    ticks = Ticks()
    heard: list[int] = []
    in_flight = InFlight(on_finished=heard.append, forget_after_s=2.0, clock=ticks)

    in_flight.published(["a", "b"])
    ticks.now += 1.5
    in_flight.published(["c"])
    assert in_flight.count() == 3

    in_flight.finished("b")
    in_flight.finished("not-ours")  # another process's call: no change, no callback
    assert (in_flight.count(), heard) == (2, [2])

    # A completion never heard does not count for ever: "a" is forgotten first.
    ticks.now += 0.6
    assert in_flight.count() == 1
    ticks.now += 1.5
    assert in_flight.count() == 0
    in_flight.finished("c")  # heard after it was forgotten: nothing to do
    assert heard == [2]


def test_a_call_heard_finishing_before_its_publish_is_counted_is_not_in_flight() -> None:
    """A quick call's completion can reach the listener before the group that published
    it is back on the event loop: counted after that, it stayed "in flight" for the
    whole ``forget_after_s``, and enough of them held lone callers back."""
    ticks = Ticks()
    heard_already = {"quick"}
    in_flight = InFlight(heard=heard_already.__contains__, forget_after_s=2.0, clock=ticks)

    in_flight.finished("quick")  # heard first: not counted yet, nothing to remove
    in_flight.published(["quick", "slow"])

    assert in_flight.count() == 1
    in_flight.finished("slow")
    assert in_flight.count() == 0


def test_the_api_asks_its_completion_listener_what_finished_already(runtime: Runtime) -> None:
    app = create_app(runtime)
    assert app.state.listener is runtime.listener
    app.state.listener.hear(b"call_done_already")
    assert runtime.group_commit.in_flight.heard("call_done_already")
    assert not runtime.group_commit.in_flight.heard("call_not_heard")


def busy(group_commit: GroupCommit, count: int) -> None:
    """As if this process had ``count`` calls running on the workers."""
    group_commit.in_flight.published(f"busy-{i}" for i in range(count))


def test_a_small_group_is_held_until_it_is_full_while_the_workers_are_busy(
    runtime: Runtime,
) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    # A hold far longer than the test: only a full group can end it.
    group_commit = GroupCommit(lambda: counting, hold_s=60, full=4)  # type: ignore[arg-type,return-value]
    busy(group_commit, 4)

    async def scenario() -> list[CallResult]:
        first = asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"i": 0})))
        await asyncio.sleep(0.05)
        assert not first.done()  # held: one call, and four already on the workers
        rest = [group_commit.submit(Submission("agent", "echo", {"i": i})) for i in (1, 2, 3)]
        return await asyncio.wait_for(asyncio.gather(first, *rest), timeout=30)

    results = asyncio.run(scenario())

    assert counting.groups == [4]
    assert [r.status for r in results] == ["queued"] * 4
    # The four are now this process's calls in flight, as well as the four before.
    assert group_commit.in_flight.count() == 8


def test_a_held_group_goes_as_soon_as_the_workers_run_short(runtime: Runtime) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = GroupCommit(lambda: counting, hold_s=60, full=4)  # type: ignore[arg-type,return-value]
    busy(group_commit, 4)

    async def scenario() -> CallResult:
        held = asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"n": 1})))
        await asyncio.sleep(0.05)
        assert not held.done()
        # The completion listener hears one of the four finish: three are left.
        group_commit.in_flight.finished("busy-0")
        return await asyncio.wait_for(held, timeout=30)

    assert asyncio.run(scenario()).status == "queued"
    assert counting.groups == [1]


def test_a_group_is_held_from_busy_calls_in_flight_until_fewer_are_left(
    runtime: Runtime,
) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    # Held from four calls in flight, far fewer than a full group of sixteen.
    group_commit = GroupCommit(lambda: counting, hold_s=60, full=16, busy=4)  # type: ignore[arg-type,return-value]
    group_commit.in_flight.forget_after_s = 600  # counted however slow the host
    busy(group_commit, 3)

    async def scenario() -> list[CallResult]:
        # Three in flight: not busy, so a call goes at once, and makes four.
        alone = await asyncio.wait_for(
            group_commit.submit(Submission("agent", "echo", {"n": 0})), timeout=30
        )
        held = [
            asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"n": n})))
            for n in (1, 2)
        ]
        await asyncio.sleep(0.05)
        assert not any(h.done() for h in held)  # two of sixteen, and the workers busy
        group_commit.in_flight.finished("busy-0")  # three left: the workers run short
        return [alone, *await asyncio.wait_for(asyncio.gather(*held), timeout=30)]

    results = asyncio.run(scenario())

    assert counting.groups == [1, 2]
    assert [r.status for r in results] == ["queued"] * 3


def test_a_hold_lasts_hold_s_at_most(runtime: Runtime) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = GroupCommit(lambda: counting, hold_s=0.05, full=4)  # type: ignore[arg-type,return-value]
    busy(group_commit, 10)  # no completion will be heard

    async def scenario() -> CallResult:
        return await asyncio.wait_for(
            group_commit.submit(Submission("agent", "echo", {"n": 1})), timeout=30
        )

    assert asyncio.run(scenario()).status == "queued"
    assert counting.groups == [1]


def test_a_lone_caller_is_never_held(runtime: Runtime) -> None:
    group_commit = GroupCommit(lambda: runtime.dispatcher, hold_s=60, full=4)
    # One after another: each call's own earlier calls are all this process has out,
    # three at most, fewer than a full group.
    assert [r.status for r in one_after_another(group_commit, 3)] == ["queued"] * 3


def counting_holds(group_commit: GroupCommit) -> list[int]:
    """The size of the group at each hold ``group_commit`` starts."""
    holds: list[int] = []
    hold = group_commit._hold

    async def counted(queue: Any) -> None:
        holds.append(len(queue.waiting))
        await hold(queue)

    group_commit._hold = counted  # type: ignore[method-assign]
    return holds


def backlogged(counting: CountingDispatcher, *, full: int, quiet_s: float) -> GroupCommit:
    """Short holds, ten calls of this process on the workers that stay counted for the
    whole test, and ``quiet_s`` after a hold that gathered nothing."""
    group_commit = GroupCommit(lambda: counting, hold_s=0.05, full=full, quiet_s=quiet_s)  # type: ignore[arg-type,return-value]
    group_commit.in_flight.forget_after_s = 600
    busy(group_commit, 10)
    return group_commit


def test_one_caller_sending_into_a_backlog_is_held_once_at_most(runtime: Runtime) -> None:
    """Fire and forget while earlier calls still run: a hold that ran out with nothing
    else arriving gathered nothing, and the next calls of the same lone caller go at once."""
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = backlogged(counting, full=4, quiet_s=600)
    holds = counting_holds(group_commit)

    assert [r.status for r in one_after_another(group_commit, 5)] == ["queued"] * 5
    assert holds == [1]
    assert counting.groups == [1] * 5


def test_holding_resumes_once_the_quiet_time_is_over(runtime: Runtime) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = backlogged(counting, full=4, quiet_s=0)
    holds = counting_holds(group_commit)

    assert [r.status for r in one_after_another(group_commit, 3)] == ["queued"] * 3
    assert holds == [1, 1, 1]


def test_calls_arriving_together_are_held_again_after_a_lone_caller(runtime: Runtime) -> None:
    counting = CountingDispatcher(runtime.dispatcher)
    group_commit = backlogged(counting, full=8, quiet_s=600)
    holds = counting_holds(group_commit)

    async def alone_then_together() -> list[CallResult]:
        # The hold state is the event loop's: one loop throughout.
        alone = [
            await asyncio.wait_for(
                group_commit.submit(Submission("agent", "echo", {"i": i})), timeout=30
            )
            for i in range(2)  # the first is held, the second is not
        ]
        calls = [group_commit.submit(Submission("agent", "echo", {"n": n})) for n in range(3)]
        return alone + await asyncio.wait_for(asyncio.gather(*calls), timeout=30)

    assert [r.status for r in asyncio.run(alone_then_together())] == ["queued"] * 5
    assert holds == [1, 3]
    assert counting.groups == [1, 1, 3]


def test_a_call_arriving_while_a_group_is_accepted_turns_holding_back_on(
    runtime: Runtime,
) -> None:
    accepting, release = threading.Event(), threading.Event()

    class Slow(CountingDispatcher):
        def submit_many(self, items: Sequence[Submission]) -> list[CallResult]:
            if len(self.groups) == 1:  # the first group after the lone caller's
                accepting.set()
                release.wait(30)
            return super().submit_many(items)

    counting = Slow(runtime.dispatcher)
    group_commit = backlogged(counting, full=8, quiet_s=600)
    holds = counting_holds(group_commit)

    async def overlapping() -> list[CallResult]:
        # Held, and nothing came: holding stops (the hold state is the event loop's).
        alone = await asyncio.wait_for(
            group_commit.submit(Submission("agent", "echo", {"n": 0})), timeout=30
        )
        first = asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"n": 1})))
        while not accepting.is_set():
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"n": 2})))
        await asyncio.sleep(0)  # the second is queued behind the group being accepted
        release.set()
        return [alone, *await asyncio.wait_for(asyncio.gather(first, second), timeout=30)]

    try:
        results = asyncio.run(overlapping())
    finally:
        release.set()  # never leave the accepting thread waiting
    assert [r.status for r in results] == ["queued"] * 3
    # The first went at once; the second came while it was accepted, so it was held.
    assert holds == [1, 1]
    assert counting.groups == [1, 1, 1]


def test_a_shutdown_during_a_hold_leaves_no_caller_hanging(runtime: Runtime) -> None:
    group_commit = GroupCommit(lambda: runtime.dispatcher, hold_s=60, full=4)
    busy(group_commit, 4)

    async def scenario() -> list[CallResult]:
        callers = [
            asyncio.ensure_future(group_commit.submit(Submission("agent", "echo", {"i": i})))
            for i in range(2)
        ]
        await asyncio.sleep(0.05)  # the drain task is holding the two
        drain = group_commit._queues[asyncio.get_running_loop()].draining
        assert drain is not None and not drain.done()
        drain.cancel()
        return await asyncio.wait_for(asyncio.gather(*callers), timeout=30)

    assert {r.http_status for r in asyncio.run(scenario())} == {503}
    assert call_count(runtime) == 0


@contextmanager
def api_without_workers(tmp_path: Path) -> Iterator[tuple[Stack, str]]:
    """A real API (one pool process per worker assumed, so a full group is 8; a hold far
    longer than the test) with no worker: every message stays in Redis to be counted.
    Yields the API and the URL of its private Redis."""
    settings = {"worker_concurrency": 1, "group_hold_ms": 1000, "mcp_call_wait_s": 0}
    with private_stack_in(tmp_path, **settings) as private:
        env = {
            **private.env,
            "TOOLROUTER_WORKER_CONCURRENCY": "1",
            "TOOLROUTER_GROUP_HOLD_MS": "1000",
            # An MCP tools/call answers with the call id at once (no worker will run it).
            "TOOLROUTER_MCP_CALL_WAIT_S": "0",
        }
        api = Stack(env=env, state_dir=tmp_path)
        api.keys["agent"] = private.runtime.keys.create("agent", ["agent"])
        try:
            api.start_api()
            yield api, private.redis.url
        finally:
            api.stop_all()


def message_sizes(redis_url: str, api: Stack) -> list[int]:
    """Calls per message waiting on ``tools.low``, oldest first (kombu pushes each
    message at the head of the list)."""
    client = redis.Redis.from_url(redis_url)
    try:
        queue = Namespace.of(api.settings).prefix + "tools.low"
        raw = list(reversed(client.lrange(queue, 0, -1)))
    finally:
        client.close()
    return [len(json.loads(base64.b64decode(json.loads(m)["body"]))[0]) for m in raw]


def test_under_a_steady_load_the_api_gathers_calls_into_full_messages(tmp_path: Path) -> None:
    """Eight agents, each submitting its next call when the last is answered, against a
    real API with no worker: once two calls are in flight (with one pool process), every
    group is held until eight have come (a full group), and goes as one message of eight."""
    with api_without_workers(tmp_path) as (api, redis_url):

        async def agent(client: AsyncClient, n: int) -> None:
            for i in range(6):
                result = await client.submit("echo", {"agent": n, "i": i})
                assert result.status == "queued", result

        async def scenario() -> None:
            async with AsyncClient(api.base_url, api.keys["agent"]) as client:
                await asyncio.wait_for(
                    asyncio.gather(*(agent(client, n) for n in range(8))), timeout=60
                )

        asyncio.run(scenario())
        sizes = message_sizes(redis_url, api)
    assert sum(sizes) == 48
    assert_held_in_eights(sizes)


def assert_held_in_eights(sizes: list[int]) -> None:
    """The first one or two groups go as they come (fewer than two calls in flight); after
    them, in eights, but for the last group: the rest of the agents' calls. Without the
    hold, callers answered one by one come back one by one: groups of one to five."""
    held = sizes[2:-1]
    assert len(held) >= 3 and set(held) == {8}, sizes


def test_mcp_tool_calls_share_the_group_queue_with_http_calls(tmp_path: Path) -> None:
    """The same load through ``/mcp`` (SPEC §11): eight MCP sessions, each calling its next
    tool when the last is answered, are accepted in the same held groups as HTTP calls."""
    with api_without_workers(tmp_path) as (api, redis_url):

        async def agent(n: int) -> None:
            async with mcp_session(api) as session:
                for i in range(6):
                    result = await session.call_tool("echo", {"agent": n, "i": i})
                    assert result.structured_content is not None, result
                    assert result.structured_content["status"] == "queued", result

        async def scenario() -> None:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as agents:
                    for n in range(8):
                        agents.start_soon(agent, n)

        anyio.run(scenario)
        sizes = message_sizes(redis_url, api)
    assert sum(sizes) == 48
    assert_held_in_eights(sizes)
