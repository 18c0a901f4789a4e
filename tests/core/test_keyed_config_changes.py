"""Keyed retries after the config changed, in process: a retry is its own call (with the
requester's arguments or an approver's edit of them), and never another request's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select

from router.canonical import args_digest, canonical_json
from router.db.schema import audit_log, batches
from router.db.schema import calls as calls_table
from router.dispatch.batches import BatchService
from router.dispatch.dispatcher import Dispatcher
from router.runtime import Runtime
from router.tools.registry import Tool, ToolRegistry
from router.tools.routing import Candidate

REUSED = "idempotency key reused with different arguments"


def without(runtime: Runtime, *names: str) -> Dispatcher:
    """The runtime's dispatcher after a config change that removed ``names``."""
    return dispatching(runtime, [t for t in runtime.registry if t.name not in names])


def schema_changed(runtime: Runtime) -> Dispatcher:
    """A config change: ``echo`` (still in ``demo.echo``) now takes ``strict``'s schema."""
    echo, strict = runtime.registry.get("echo"), runtime.registry.get("strict")
    assert echo is not None and strict is not None
    changed = replace(echo, validator=strict.validator, any_object=False)
    return dispatching(runtime, [changed if t.name == "echo" else t for t in runtime.registry])


def dispatching(runtime: Runtime, tools: list[Tool]) -> Dispatcher:
    return Dispatcher(
        runtime.store,
        ToolRegistry(tools),
        runtime.publisher,
        runtime.audit,
        runtime.keyring,
        clock=runtime.clock,
        max_args_bytes=runtime.settings.max_args_bytes,
        max_nesting=runtime.settings.max_nesting,
    )


def audit_count(runtime: Runtime, **where: Any) -> int:
    query = select(func.count()).select_from(audit_log)
    for column, value in where.items():
        query = query.where(audit_log.c[column] == value)
    with runtime.store.reading() as conn:
        return int(conn.execute(query).scalar_one())


# -- a call by capability is not a retry of another request's call ----------------------


def test_a_capability_call_does_not_replay_a_direct_call_of_a_tool_it_never_ranked(
    runtime: Runtime,
) -> None:
    """The key names a direct call of ``echo``; a call by a capability whose ranking does
    not hold ``echo`` is another request: the 409, never echo's call."""
    first = runtime.dispatcher.submit("agent", "echo", {"q": 1}, "k-cap")
    assert first.call_id is not None
    again = runtime.dispatcher.submit_by_capability(
        "agent", "search.web", ["search_backup"], {"q": 1}, "k-cap"
    )
    assert again.call_id != first.call_id, again.to_dict()
    assert again.http_status == 409 and again.error == REUSED, again


def test_an_unknown_capability_does_not_replay_a_direct_call(runtime: Runtime) -> None:
    """No tool has capability ``no.such``: the ranking is empty. The key's direct call of
    ``echo`` is not this request's call."""
    first = runtime.dispatcher.submit("agent", "echo", {"q": 2}, "k-none")
    assert first.call_id is not None
    again = runtime.dispatcher.submit_by_capability("agent", "no.such", [], {"q": 2}, "k-none")
    assert again.call_id is None, again.to_dict()


def test_a_dry_run_by_capability_does_not_replay_a_direct_call(runtime: Runtime) -> None:
    first = runtime.dispatcher.submit("agent", "echo", {"q": 3}, "k-dry")
    assert first.call_id is not None
    explained = runtime.explainer.explain_by_capability("agent", "no.such", [], {"q": 3}, "k-dry")
    assert isinstance(explained, dict)
    assert explained["outcome"] != "replayed", explained


@pytest.mark.parametrize("args", [[1], None, "x"], ids=["list", "null", "string"])
def test_a_capability_call_of_arguments_no_call_has_is_never_a_replay(
    runtime: Runtime, args: object
) -> None:
    first = runtime.dispatcher.submit_by_capability(
        "agent", "demo.echo", ["echo"], {"q": 4}, "k-malformed"
    )
    assert first.call_id is not None, first.to_dict()
    again = runtime.dispatcher.submit_by_capability(
        "agent", "demo.echo", ["echo"], args, "k-malformed"
    )
    assert again.call_id is None and again.status == "rejected", again.to_dict()
    ranked = [Candidate("echo", 1.0, "capability")]
    explained = runtime.explainer.explain_by_capability(
        "agent", "demo.echo", ranked, args, "k-malformed"
    )
    assert isinstance(explained, dict) and explained["outcome"] == "refused", explained


# -- an approver's edit: the requester's retry is the requester's own request ----------


def _edit(runtime: Runtime, call_id: str, args: dict[str, Any]) -> None:
    with runtime.store.transaction() as conn:
        row = runtime.store.get(conn, call_id)
        assert row is not None
        text = canonical_json(args)
        assert runtime.store.edit_pending(
            conn, row, text, args_digest(args), "approver", now=runtime.clock()
        )


def test_a_retry_of_an_edited_call_with_the_requesters_arguments_replays(
    runtime: Runtime,
) -> None:
    """The requester sends exactly what it sent; an approver has edited the arguments."""
    original = {"to": "acct-1", "amount": 2000}
    first = runtime.dispatcher.submit("agent", "edit_wire", original, "k-edit")
    assert first.status == "pending", first.to_dict()
    assert first.call_id is not None
    _edit(runtime, first.call_id, {"to": "acct-1", "amount": 1500})
    again = runtime.dispatcher.submit("agent", "edit_wire", original, "k-edit")
    assert again.call_id == first.call_id, again.to_dict()


def test_a_retry_of_an_edited_call_replays_after_its_tool_is_removed(runtime: Runtime) -> None:
    original = {"to": "acct-2", "amount": 2000}
    first = runtime.dispatcher.submit("agent", "edit_wire", original, "k-edit-2")
    assert first.call_id is not None
    _edit(runtime, first.call_id, {"to": "acct-2", "amount": 1500})
    again = without(runtime, "edit_wire").submit("agent", "edit_wire", original, "k-edit-2")
    assert again.call_id == first.call_id, again.to_dict()


def test_a_batch_sent_again_replays_its_edited_call(runtime: Runtime) -> None:
    service = BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock)
    calls = [{"tool": "edit_wire", "args": {"to": "acct-3", "amount": 2000}}]
    first = service.submit("agent", calls, key="batch-edit", offset=0)
    assert first.accepted == 1, first.to_dict()
    with runtime.store.reading() as conn:
        (call_id,) = conn.execute(
            select(calls_table.c.id).where(calls_table.c.batch_id == first.batch_id)
        ).scalars()
    _edit(runtime, call_id, {"to": "acct-3", "amount": 1500})
    again = service.submit("agent", calls, key="batch-edit", offset=0)
    assert (again.accepted, again.replayed, again.rejected) == (0, 1, []), again.to_dict()


# -- refusals beside retries: audited once, counted once --------------------------


def test_refused_retries_in_a_batch_audit_once_and_count_in_the_batch(runtime: Runtime) -> None:
    """A batch sent again after ``echo`` was removed: the call at index 0 is replayed (not
    audited), a refusal with no call stored is audited once and counted in the batch's
    ``rejected`` as in the receipt, and a key reused with other arguments is a 409 that is
    not audited."""
    service = BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock)
    calls = [
        {"tool": "echo", "args": {"n": 1}},
        {"tool": "echo", "args": {"n": 2}, "idempotency_key": "bk"},
    ]
    first = service.submit("agent", calls, key="batch-1", offset=0)
    assert (first.accepted, first.rejected) == (2, [])
    before = audit_count(runtime, event="unknown")
    after = BatchService(runtime.store, without(runtime, "echo"), clock=runtime.clock)
    sent = [
        *calls,
        {"tool": "echo", "args": {"n": 3}},  # index 2: nothing there, a new call refused
        {"tool": "echo", "args": {"n": 9}, "idempotency_key": "bk"},  # another call under bk
    ]
    again = after.submit("agent", sent, key="batch-1", offset=0)
    assert (again.accepted, again.replayed) == (0, 2), again.to_dict()
    assert [(r.index, r.error) for r in again.rejected] == [
        (2, "unknown tool: echo"),
        (3, REUSED),
    ], again.to_dict()
    assert audit_count(runtime, event="unknown") == before + 1
    with runtime.store.reading() as conn:
        total = conn.execute(
            select(batches.c.rejected).where(batches.c.id == again.batch_id)
        ).scalar_one()
    assert total == len(first.rejected) + len(again.rejected)


def test_a_refused_retry_under_a_used_key_is_answered_and_never_raises(runtime: Runtime) -> None:
    first = runtime.dispatcher.submit("agent", "echo", {"n": 1}, "k-r")
    after = without(runtime, "echo")
    before = audit_count(runtime)
    same = after.submit("agent", "echo", {"n": 1}, "k-r")
    assert same.call_id == first.call_id
    other = after.submit("agent", "echo", {"n": 2}, "k-r")
    assert other.http_status == 409 and other.error == REUSED
    # Another submitting key: its own key space, refused as a new call and audited.
    stranger = after.submit("agent2", "echo", {"n": 1}, "k-r")
    assert stranger.call_id is None and stranger.status == "rejected"
    # Malformed args and key are refused as new calls (audited once), never read as retries.
    assert after.submit("agent", "echo", [1], "k-r").status == "rejected"
    assert after.submit("agent", "echo", {"n": 1}, "\x00").status == "rejected"
    assert audit_count(runtime) == before + 3  # the stranger's, the list's, the bad key's


# -- by capability: its tool still ranked, but its schema changed -----------------------


def test_a_retry_by_capability_replays_after_its_tools_schema_changed(runtime: Runtime) -> None:
    """By tool and by capability alike, though the tool no longer takes the arguments (the
    choice by capability would pass it over, for another tool or for none)."""
    first = runtime.dispatcher.submit_by_capability(
        "agent", "demo.echo", ["echo"], {"q": 1}, "k-schema"
    )
    assert first.call_id is not None and first.tool == "echo", first.to_dict()
    after = schema_changed(runtime)
    assert after.submit("agent", "echo", {"q": 1}, "k-schema").call_id == first.call_id
    alone = after.submit_by_capability("agent", "demo.echo", ["echo"], {"q": 1}, "k-schema")
    ranked = after.submit_by_capability(
        "agent", "demo.echo", ["echo", "search_backup"], {"q": 1}, "k-schema"
    )
    answers = [(r.call_id, r.http_status, r.error) for r in (alone, ranked)]
    assert answers == [(first.call_id, 200, None)] * 2, answers
