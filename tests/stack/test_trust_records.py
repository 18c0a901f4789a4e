"""Attacks from inside the database, on the real stack: someone who can change any row
(triggers included) but does not hold the deployment's key.

- swap a pending call's tool for one that needs more approvers, or change its arguments:
  the approval worker refuses to decide it, and nothing runs;
- hand-write a ``queued`` row for a gated tool, with or without a forged approved request,
  or point a new call at another call's spent approval: the worker refuses it
  (``ApprovalMissing``) whether a run message reaches it through Redis or the reconciler
  finds it, and its handler never runs; nor does a call that ran on its approval, set
  back to ``queued``;
- insert decisions by invented approvers: N-of-M counts only decisions the approval
  worker sealed;
- rewrite history: ``toolrouter audit verify`` (the CLI) names the rows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from router.canonical import canonical_json, sha256_hex
from router.clock import wall_clock_ms
from router.ids import new_call_id, new_request_id
from router.messaging.run_message import Precedence, message_for
from router.runtime import Runtime
from workers.execution import Executor

from ..support.audit import audit_events, verify_on_the_cli
from ..support.calls import decide, result, submit_pending
from ..support.stack import Stack


@pytest.fixture
def rt(stack: Stack) -> Any:
    """An in-process runtime on the stack's database, Redis and key: the attacker's view
    of the database is the same, minus the key (the tests never sign with it)."""
    runtime = Runtime(stack.settings)
    runtime.prepare()
    yield runtime
    runtime.close()


def runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def status(rt: Runtime, call_id: str) -> str:
    return rt.calls.read(call_id).status


def wait_for_status(rt: Runtime, call_id: str, wanted: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (now := status(rt, call_id)) in wanted:
            return now
        time.sleep(0.05)
    raise AssertionError(f"{call_id} still {status(rt, call_id)} after {timeout} s")


def backend(rt: Runtime) -> str:
    return rt.engine.dialect.name


def test_a_pending_call_swapped_to_a_stricter_tool_is_never_released(
    stack: Stack, rt: Runtime, tmp_path: Path
) -> None:
    """The issue's attack: one approval of a 1-of tool must not run a 2-of tool. Swapping
    the call alone, or the call and its request together, both fail: the first no longer
    matches the sealed binding, the second breaks the seal."""
    ledger = tmp_path / "ledger"
    refused = []
    for swap_request in (False, True):
        call = submit_pending(stack, tool="gated_ledger", args={"path": str(ledger)})
        with rt.engine.begin() as conn:
            conn.execute(
                text("UPDATE calls SET tool = 'two_man_ledger' WHERE id = :id"),
                {"id": call["call_id"]},
            )
            if swap_request:
                conn.execute(
                    text("UPDATE approval_requests SET tool = 'two_man_ledger' WHERE id = :id"),
                    {"id": call["request_id"]},
                )
        answer = decide(stack, call["request_id"])
        refused.append(answer.status_code)
        assert answer.status_code == 409, answer.text
        assert status(rt, call["call_id"]) == "pending"
    # A legitimate approval afterwards runs through the same worker: the swapped calls
    # would have run before it, had they been released.
    honest = submit_pending(stack, tool="gated_ledger", args={"path": str(tmp_path / "honest")})
    assert decide(stack, honest["request_id"], wait_s=30).json()["status"] == "succeeded"
    print(
        f"[{backend(rt)}] tool swap: approvals refused={refused} runs of swapped calls="
        f"{runs(ledger)}"
    )
    assert runs(ledger) == 0


def test_a_hand_written_queued_row_for_a_gated_tool_never_runs(
    stack: Stack, rt: Runtime, tmp_path: Path
) -> None:
    """Through Redis (a run message, as anyone on Redis can send) and through the
    reconciler (an old unpublished row): failed as ApprovalMissing, handler never run."""
    ledger = tmp_path / "ledger"
    args = {"path": str(ledger)}
    canonical = canonical_json(args)
    now = wall_clock_ms()
    forged: dict[str, str | None] = {}
    for how in ("redis", "reconciler", "forged request"):
        call_id = new_call_id()
        request_id = new_request_id() if how == "forged request" else None
        forged[how] = call_id
        with rt.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO calls (id, tool, risk, args, args_sha256, status, requested_by,"
                    " attempt, created_at, updated_at, published_at, request_id) VALUES (:id,"
                    " 'gated_ledger', 'high', :args, :digest, 'queued', 'agent', 0, :now, :now,"
                    " :published, :request)"
                ),
                {
                    "id": call_id,
                    "args": canonical,
                    "digest": sha256_hex(canonical),
                    "now": now,
                    "published": 0 if how == "reconciler" else now,
                    "request": request_id,
                },
            )
            if request_id is not None:
                conn.execute(
                    text(
                        "INSERT INTO approval_requests (id, call_id, tool, args_sha256,"
                        " requested_by, approvers, approvals_required, status, created_at,"
                        " expires_at, decided_at, binding_mac, release_mac) VALUES (:rid, :cid,"
                        " 'gated_ledger', :digest, 'agent', '[\"approver\"]', 1, 'approved',"
                        " :now, :later, :now, :mac, :mac)"
                    ),
                    {
                        "rid": request_id,
                        "cid": call_id,
                        "digest": sha256_hex(canonical),
                        "now": now,
                        "later": now + 3_600_000,
                        "mac": "0" * 64,
                    },
                )
        if how != "reconciler":
            tool = rt.registry.get("gated_ledger")
            assert tool is not None
            rt.publisher.publish([message_for(tool, call_id, Precedence.INTERACTIVE)])
    Executor(rt, rt.notifier(), actor="reconciler-under-test").reconcile()
    outcomes = {
        how: (wait_for_status(rt, call_id, {"failed", "succeeded"}), rt.calls.read(call_id))
        for how, call_id in forged.items()
        if call_id is not None
    }
    print(
        f"[{backend(rt)}] hand-written queued rows: "
        + ", ".join(f"{how}={state}/{row.error_type}" for how, (state, row) in outcomes.items())
        + f" runs={runs(ledger)}"
    )
    for state, row in outcomes.values():
        assert (state, row.error_type) == ("failed", "ApprovalMissing")
    assert runs(ledger) == 0


def test_another_calls_approval_cannot_be_reused(stack: Stack, rt: Runtime, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    call = submit_pending(stack, tool="gated_ledger", args={"path": str(ledger)})
    assert decide(stack, call["request_id"], wait_s=30).json()["status"] == "succeeded"
    assert runs(ledger) == 1
    copy_id = new_call_id()
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO calls (id, tool, risk, args, args_sha256, status, requested_by,"
                " attempt, created_at, updated_at, published_at, request_id)"
                " SELECT :copy, tool, risk, args, args_sha256, 'queued', requested_by, 0,"
                " created_at, updated_at, published_at, request_id FROM calls WHERE id = :id"
            ),
            {"copy": copy_id, "id": call["call_id"]},
        )
    tool = rt.registry.get("gated_ledger")
    assert tool is not None
    rt.publisher.publish([message_for(tool, copy_id, Precedence.INTERACTIVE)])
    assert wait_for_status(rt, copy_id, {"failed", "succeeded"}) == "failed"
    print(
        f"[{backend(rt)}] approval reuse: copy={rt.calls.read(copy_id).error_type} "
        f"runs={runs(ledger)}"
    )
    assert rt.calls.read(copy_id).error_type == "ApprovalMissing"
    assert runs(ledger) == 1


def test_a_spent_approval_does_not_run_its_call_again(
    stack: Stack, rt: Runtime, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    call = submit_pending(stack, tool="gated_ledger", args={"path": str(ledger)})
    assert decide(stack, call["request_id"], wait_s=30).json()["status"] == "succeeded"
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE calls SET status = 'queued', value = NULL, finished_at = NULL,"
                " lease_until = NULL WHERE id = :id"
            ),
            {"id": call["call_id"]},
        )
    tool = rt.registry.get("gated_ledger")
    assert tool is not None
    rt.publisher.publish([message_for(tool, call["call_id"], Precedence.INTERACTIVE)])
    assert wait_for_status(rt, call["call_id"], {"failed", "succeeded"}) == "failed"
    print(f"[{backend(rt)}] set back to queued: runs={runs(ledger)}")
    assert rt.calls.read(call["call_id"]).error_type == "ApprovalSpent"
    assert runs(ledger) == 1


def test_decisions_written_into_the_database_do_not_count(stack: Stack, rt: Runtime) -> None:
    call = submit_pending(stack, tool="two_man")
    with rt.engine.begin() as conn:
        for ghost in ("ghost1", "ghost2"):
            conn.execute(
                text(
                    "INSERT INTO approval_decisions (request_id, approver, decision, reason, at,"
                    " mac) VALUES (:rid, :who, 'approve', 'forged', 1, :mac)"
                ),
                {"rid": call["request_id"], "who": ghost, "mac": "0" * 64},
            )
    answer = decide(stack, call["request_id"]).json()
    print(
        f"[{backend(rt)}] forged decision rows: ghosts=2 real=1 -> approvals="
        f"{answer.get('approvals')} of {answer.get('approvals_required')} "
        f"released={answer.get('released')}"
    )
    assert (answer["approvals"], answer["released"]) == (1, False)
    assert status(rt, call["call_id"]) == "pending"
    assert [event for event, _ in audit_events(stack, call["call_id"])] == ["pending", "approved"]
    second = decide(stack, call["request_id"], key="approver2", wait_s=30).json()
    assert second["status"] == "succeeded"
    assert result(stack, call["call_id"])["status"] == "succeeded"


def test_verify_on_the_cli_names_the_rows_someone_rewrote(runtime: Runtime) -> None:
    """``toolrouter audit verify`` as an operator runs it, on a log whose middle was
    edited and re-hashed with plain SHA-256 (the first release's chain) and whose tail
    was cut after a signed head was exported."""
    from router.audit import head as audit_head
    from router.audit.log import AuditEntry, hashed_text

    with runtime.store.transaction() as conn:
        runtime.audit.append(
            conn,
            [AuditEntry(event="queued", actor="agent", tool="wire") for _ in range(6)],
            at=runtime.clock(),
        )
    namespace = runtime.namespace.name
    audit_head.export(
        runtime.store,
        runtime.keyring,
        namespace,
        audit_head.head_file(runtime.settings, namespace),
        runtime.clock,
    )
    with runtime.engine.begin() as conn:
        row = dict(conn.execute(text("SELECT * FROM audit_log WHERE seq = 3")).mappings().one())
        row["actor"] = "mallory"
        forged_hash = sha256_hex(hashed_text(row))
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_log DISABLE TRIGGER USER"))
        else:
            conn.execute(text("DROP TRIGGER audit_log_no_update"))
            conn.execute(text("DROP TRIGGER audit_log_no_delete"))
        conn.execute(
            text("UPDATE audit_log SET actor = 'mallory', hash = :h WHERE seq = 3"),
            {"h": forged_hash},
        )
        conn.execute(text("DELETE FROM audit_log WHERE seq >= 5"))
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_log ENABLE TRIGGER USER"))
    returncode, report = verify_on_the_cli(runtime)
    print(
        f"[{backend(runtime)}] cli verify after rewrite: exit={returncode} problems="
        + "; ".join(f"{p['seq']}: {p['reason']}" for p in report["problems"])
    )
    assert returncode == 1 and not report["ok"]
    seqs = {problem["seq"] for problem in report["problems"]}
    assert 3 in seqs and 5 in seqs
