"""What an approver's list shows when other approvers' requests come first: every request
the key may decide, in order, however many of others' are read past."""

from __future__ import annotations

import pytest
from sqlalchemy import event, select

from approvals.gate import Gate
from router.approval import requests
from router.auth.principal import Principal
from router.clock import FakeClock
from router.db.schema import approval_requests
from router.runtime import Runtime

APPROVER = Principal("approver", frozenset({"approver"}))
CFO = Principal("cfo", frozenset({"finance"}))
OPERATOR = Principal("operator", frozenset({"operator"}))


@pytest.fixture(autouse=True)
def _deciders(runtime: Runtime) -> None:
    for name, roles in (("approver", ["approver"]), ("cfo", ["finance"])):
        runtime.keys.create(name, roles)


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> int:
    """Pages of a few rows, so that a handful of requests spans several of them."""
    monkeypatch.setattr(requests, "PAGE", 4)
    return 4


def gated(runtime: Runtime, clock: FakeClock, tool: str) -> str:
    """A gated call's request id; each one a millisecond after the one before."""
    clock.advance(1)
    result = runtime.dispatcher.submit("agent", tool, {"n": 1})
    assert result.status == "pending" and result.request_id is not None, result
    return result.request_id


def listed(
    runtime: Runtime, who: Principal, status: str = "pending", limit: int = 200
) -> list[str]:
    return [r["request_id"] for r in runtime.approvals_view.list_requests(who, status, limit)]


def test_a_request_behind_a_full_page_of_others_is_listed(
    runtime: Runtime, clock: FakeClock
) -> None:
    """More of finance's requests than a page and a list hold, then one for approvers."""
    finance = [gated(runtime, clock, "finance_wire") for _ in range(requests.PAGE + 1)]
    mine = gated(runtime, clock, "high_echo")
    assert listed(runtime, APPROVER, limit=200) == [mine]
    assert listed(runtime, CFO, limit=3) == finance[:3]


def test_pages_keep_the_order_and_skip_nothing(
    runtime: Runtime, clock: FakeClock, small_pages: int
) -> None:
    made = [
        (gated(runtime, clock, "high_echo" if i % 5 == 4 else "finance_wire"), i % 5 == 4)
        for i in range(small_pages * 5 + 1)
    ]
    mine = [request_id for request_id, for_approver in made if for_approver]
    assert listed(runtime, APPROVER) == mine
    assert listed(runtime, APPROVER, limit=2) == mine[:2]
    assert listed(runtime, OPERATOR) == [request_id for request_id, _ in made]


def test_decided_requests_are_listed_and_told_newest_first(
    runtime: Runtime, clock: FakeClock, small_pages: int
) -> None:
    gate = Gate(runtime, runtime.notifier())
    denied: list[str] = []
    for i in range(small_pages * 3):
        request_id = gated(runtime, clock, "finance_wire")
        clock.advance(1)
        assert gate.decide(request_id, "cfo", "approve" if i % 2 else "deny").ok
    for _ in range(2):
        request_id = gated(runtime, clock, "high_echo")
        clock.advance(1)
        assert gate.decide(request_id, "approver", "deny").ok
        denied.append(request_id)
    newest_first = denied[::-1]
    assert listed(runtime, APPROVER, status="denied") == newest_first
    assert [r["request_id"] for r in runtime.approvals_view.history(APPROVER)] == newest_first
    # The finance key sees its own: half approved, half denied, each list by its status.
    assert len(listed(runtime, CFO, status="approved")) == small_pages * 3 // 2
    assert len(listed(runtime, CFO, status="denied")) == small_pages * 3 // 2
    assert len(runtime.approvals_view.history(CFO, limit=100)) == small_pages * 3


def test_a_request_past_its_expiry_is_neither_listed_nor_counted_before_the_sweep(
    runtime: Runtime, clock: FakeClock
) -> None:
    expired = gated(runtime, clock, "high_echo")
    with runtime.store.reading() as conn:
        expires_at = conn.execute(select(approval_requests.c.expires_at)).scalar_one()
    clock.advance(expires_at - clock.now)  # due, and the sweep has not run
    fresh = gated(runtime, clock, "high_echo")
    assert listed(runtime, APPROVER) == [fresh]
    assert listed(runtime, OPERATOR) == [fresh]
    with runtime.store.reading() as conn:
        assert requests.count_pending(conn, now=clock.now) == 1
    assert expired not in listed(runtime, APPROVER)


def test_a_list_reads_the_decisions_of_the_requests_it_shows_in_one_query(
    runtime: Runtime, clock: FakeClock
) -> None:
    """However many N-of-M requests this key approved already: they are left out by the
    query, not read one by one."""
    gate = Gate(runtime, runtime.notifier())
    for _ in range(30):
        assert gate.decide(gated(runtime, clock, "two_man"), "approver", "approve").ok
    fresh = gated(runtime, clock, "two_man")
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", count)
    try:
        assert listed(runtime, APPROVER) == [fresh]
    finally:
        event.remove(runtime.engine, "before_cursor_execute", count)
    assert len(statements) <= 6, statements


def test_a_key_reads_only_the_requests_that_name_one_of_its_roles(
    runtime: Runtime, clock: FakeClock, small_pages: int
) -> None:
    """Requests of other roles are left out by the query: a key that may decide none of
    many reads one page, not all of them."""
    for _ in range(small_pages * 3):
        gated(runtime, clock, "finance_wire")
    reads: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "FROM approval_requests" in statement:
            reads.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", count)
    try:
        assert listed(runtime, APPROVER) == []
        assert runtime.approvals_view.history(APPROVER) == []
    finally:
        event.remove(runtime.engine, "before_cursor_execute", count)
    assert len(reads) == 2, reads
