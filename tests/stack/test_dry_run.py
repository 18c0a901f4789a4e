"""Dry runs (``"dry_run": true`` on ``POST /v1/calls``, ``toolrouter call --dry-run``, the
clients' ``explain``) on the real stack: what submitting would do, answered by the same
checks a submission runs, and proof that nothing was stored, published, audited, taken
from a rate limit or run."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import func, select

from router import AsyncClient, Client
from router.constants import ALL_QUEUES, RATE_BUCKET, RESULT_CACHE
from router.db.schema import approval_decisions, approval_requests, audit_log, batches, calls
from router.messaging.namespace import Namespace
from router.runtime import Runtime

from ..support.calls import submit
from ..support.stack import Stack
from .test_cli import stack_cli_env, toolrouter

WAIT_S = 30
DRY_RUN_FIELDS = {
    "ok",
    "dry_run",
    "outcome",
    "tool",
    "capability",
    "refused",
    "replay",
    "queue",
    "approval",
    "rate_limit",
    "cache",
    "fallbacks",
    "fallbacks_not_tried",
}
NOT_GATED = {
    "required": False,
    "approvers": [],
    "approvals_required": 0,
    "timeout_s": None,
    "rules": [],
}
HIGH_RISK = "risk: high (requires_approval unset: high risk needs approval)"


def dry_run(http: httpx.Client, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    """A dry run answers 200 with every field of the explanation, whatever it explains."""
    response = http.post("/v1/calls", json={**body, "dry_run": True}, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert set(answer) == DRY_RUN_FIELDS, answer
    assert answer["ok"] is True and answer["dry_run"] is True
    return answer


def explain(http: httpx.Client, tool: str, args: Any = None, **extra: Any) -> dict[str, Any]:
    return dry_run(http, {"tool": tool, "args": {} if args is None else args, **extra})


def prefix(stack: Stack) -> str:
    return Namespace.of(stack.settings).prefix


def redis_of(stack: Stack) -> redis.Redis:
    return redis.Redis.from_url(stack.env["TOOLROUTER_REDIS_URL"])


def assert_nothing_after_a_refusal(answer: dict[str, Any]) -> None:
    assert answer["outcome"] == "refused"
    assert answer["replay"] is None and answer["queue"] is None and answer["approval"] is None
    assert answer["rate_limit"] is None and answer["cache"] is None
    assert answer["fallbacks"] == []


# -- what would happen ----------------------------------------------------------------------


def test_an_ungated_call_would_be_queued_on_its_risk_queue(stack: Stack) -> None:
    with stack.client() as http:
        answer = explain(http, "echo", {"x": 1})
    assert answer["outcome"] == "queued"
    assert answer["tool"] == "echo"
    assert answer["queue"] == {"name": "tools.low", "key": f"{prefix(stack)}tools.low"}
    assert answer["approval"] == NOT_GATED
    assert answer["refused"] is None and answer["replay"] is None
    assert answer["capability"] is None
    assert answer["rate_limit"] is None and answer["cache"] is None
    assert answer["fallbacks"] == []


@pytest.mark.parametrize(
    ("tool", "approvers", "required"),
    [
        ("high_echo", ["approver"], 1),
        ("finance_wire", ["finance"], 1),
        ("two_man", ["approver"], 2),
    ],
)
def test_a_gated_call_names_its_approvers_and_the_rule_that_gates_it(
    stack: Stack, tool: str, approvers: list[str], required: int
) -> None:
    with stack.client() as http:
        answer = explain(http, tool, {"n": 1})
    assert answer["outcome"] == "pending"
    assert answer["queue"] == {"name": "tools.high", "key": f"{prefix(stack)}tools.high"}
    assert answer["approval"] == {
        "required": True,
        "approvers": approvers,
        "approvals_required": required,
        "timeout_s": 3600.0,
        "rules": [{"kind": "tool_config", "name": tool, "why": HIGH_RISK}],
    }


def test_the_approval_explained_is_the_one_a_submission_issues(stack: Stack) -> None:
    with stack.client() as http:
        answer = explain(http, "two_man", {"n": 2})
        pending = submit(http, "two_man", {"n": 2})
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{pending['request_id']}").json()["request"]
    assert pending["status"] == answer["outcome"] == "pending"
    assert request["approvers"] == answer["approval"]["approvers"]
    assert request["approvals_required"] == answer["approval"]["approvals_required"]


def test_an_unknown_tool_would_be_rejected_with_suggestions(stack: Stack) -> None:
    with stack.client() as http:
        answer = explain(http, "ehco", {})
    assert_nothing_after_a_refusal(answer)
    assert answer["tool"] == "ehco"
    assert answer["refused"] == {
        "status": "rejected",
        "http_status": 200,
        "error": "unknown tool: ehco",
        "did_you_mean": ["echo"],
    }


def test_invalid_arguments_are_refused_word_for_word_as_a_submission_is(stack: Stack) -> None:
    bad = {"to": "alice", "amount": -5}
    with stack.client() as http:
        answer = explain(http, "strict", bad)
        submitted = submit(http, "strict", bad)
    assert_nothing_after_a_refusal(answer)
    assert submitted["status"] == "rejected"
    assert answer["refused"]["status"] == "rejected"
    assert answer["refused"]["http_status"] == 200
    assert answer["refused"]["error"] == submitted["error"]
    assert answer["refused"]["error"].startswith("invalid arguments: ")


def test_too_deep_and_too_large_arguments_are_refused(stack: Stack) -> None:
    deep: dict[str, Any] = {}
    for _ in range(70):
        deep = {"a": deep}
    with stack.client() as http:
        too_deep = explain(http, "echo", deep)
        too_large = explain(http, "echo", {"blob": "x" * (260 * 1024)})
    assert_nothing_after_a_refusal(too_deep)
    assert too_deep["refused"]["error"] == (
        "invalid arguments: arguments nested deeper than the limit of 64 levels"
    )
    assert_nothing_after_a_refusal(too_large)
    assert too_large["refused"]["status"] == "bad_request"
    assert too_large["refused"]["http_status"] == 413
    assert too_large["refused"]["error"].startswith("arguments too large: ")


def test_an_idempotency_key_in_use_is_a_replay_or_a_conflict(stack: Stack) -> None:
    key = f"dry-{uuid.uuid4().hex}"
    with stack.client() as http:
        first = submit(http, "echo", {"v": 1}, idempotency_key=key, wait_s=WAIT_S)
        replay = explain(http, "echo", {"v": 1}, idempotency_key=key)
        by_header = dry_run(http, {"tool": "echo", "args": {"v": 1}}, **{"Idempotency-Key": key})
        conflict = explain(http, "echo", {"v": 2}, idempotency_key=key)
    assert first["status"] == "succeeded"
    for answer in (replay, by_header):
        assert answer["outcome"] == "replayed"
        assert answer["replay"] == first
        assert answer["queue"] is None and answer["approval"] is None
    assert_nothing_after_a_refusal(conflict)
    assert conflict["refused"] == {
        "status": "conflict",
        "http_status": 409,
        "error": "idempotency key reused with different arguments",
        "did_you_mean": [],
    }


def test_a_dry_run_does_not_take_its_idempotency_key(stack: Stack) -> None:
    key = f"dry-{uuid.uuid4().hex}"
    with stack.client() as http:
        assert explain(http, "echo", {"v": 1}, idempotency_key=key)["outcome"] == "queued"
        # Had the dry run taken the key, other arguments would now be a conflict.
        assert submit(http, "echo", {"v": 2}, idempotency_key=key)["status"] == "queued"


def test_the_cache_would_answer_identical_arguments(stack: Stack, tmp_path: Path) -> None:
    args = {"path": str(tmp_path / "ledger"), "label": uuid.uuid4().hex}
    with stack.client() as http:
        before = explain(http, "cached_ledger", args)
        ran = submit(http, "cached_ledger", args, wait_s=WAIT_S)
        after = explain(http, "cached_ledger", args)
        other = explain(http, "cached_ledger", {**args, "label": "other"})
    assert ran["status"] == "succeeded"
    assert before["cache"] == {"ttl_s": 60.0, "hit": False}
    assert after["cache"] == {"ttl_s": 60.0, "hit": True}
    assert other["cache"] == {"ttl_s": 60.0, "hit": False}
    assert after["outcome"] == "queued"


def test_the_rate_limit_is_read_without_taking_a_token(stack: Stack, tmp_path: Path) -> None:
    bucket = f"{prefix(stack)}{RATE_BUCKET}:limited_ledger"
    args = {"path": str(tmp_path / "ledger")}
    client = redis_of(stack)
    try:
        client.delete(bucket)
        with stack.client() as http:
            full = [explain(http, "limited_ledger", args)["rate_limit"] for _ in range(3)]
        assert (
            full
            == [{"limit": "2/s", "capacity": 2, "remaining": 2, "passes_now": True, "wait_s": 0.0}]
            * 3
        )
        assert not client.exists(bucket)
        # An empty bucket, as two runs in a row leave it: a run now would wait.
        seconds, micros = client.time()
        client.hset(bucket, mapping={"tokens": "0", "ts": seconds * 1000 + micros // 1000})
        emptied = client.hgetall(bucket)
        with stack.client() as http:
            empty = explain(http, "limited_ledger", args)["rate_limit"]
        assert empty["remaining"] == 0 and empty["passes_now"] is False
        assert 0 < empty["wait_s"] <= 0.5
        assert client.hgetall(bucket) == emptied
    finally:
        client.delete(bucket)
        client.close()


def test_a_call_by_capability_names_the_tool_the_ranking_and_the_fallbacks(stack: Stack) -> None:
    with stack.client() as http:
        answer = dry_run(http, {"capability": "search.web", "args": {"q": "x"}})
        routed = http.post(
            "/v1/route", json={"capability": "search.web", "strategy": "capability"}
        ).json()
    ranking = [candidate["tool"] for candidate in routed["candidates"]]
    assert sorted(ranking) == ["search_backup", "search_primary"]
    assert answer["outcome"] == "queued"
    assert answer["capability"]["name"] == "search.web"
    assert [c["tool"] for c in answer["capability"]["ranking"]] == ranking
    assert all(c["takes_args"] for c in answer["capability"]["ranking"])
    assert answer["tool"] == ranking[0]
    assert answer["fallbacks"] == ranking[1:]


def test_a_capability_no_tool_has_is_refused(stack: Stack) -> None:
    with stack.client() as http:
        answer = dry_run(http, {"capability": "no.such", "args": {}})
    assert_nothing_after_a_refusal(answer)
    assert answer["tool"] is None
    assert answer["capability"] == {"name": "no.such", "ranking": []}
    assert answer["refused"]["error"] == "no tool declares capability no.such"


def test_the_configured_fallbacks_are_named(stack: Stack) -> None:
    with stack.client() as http:
        answer = explain(http, "search_primary", {"q": "x"})
    assert answer["fallbacks"] == ["search_backup"]
    assert answer["fallbacks_not_tried"] == []


# -- who may ask, and bad input -------------------------------------------------------------


def test_a_dry_run_needs_the_agent_role(stack: Stack) -> None:
    with stack.client("approver") as http:
        response = http.post("/v1/calls", json={"tool": "echo", "dry_run": True})
    assert response.status_code == 403
    assert response.json() == {"ok": False, "error": "agent role required to submit calls"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"tool": "echo", "dry_run": "yes"}, "dry_run must be true or false"),
        ({"tool": "echo", "dry_run": None}, "dry_run must be true or false"),
        ({"tool": 5, "dry_run": True}, "tool must be a string"),
        (
            {"tool": "echo", "capability": "x", "dry_run": True},
            "give either tool or capability, not both",
        ),
        ({"dry_run": True}, "missing field: tool"),
        ({"tool": "echo", "dry_run": True, "dryrun": True}, "unknown field: dryrun"),
    ],
)
def test_a_malformed_dry_run_is_a_422(stack: Stack, body: dict[str, Any], error: str) -> None:
    with stack.client() as http:
        response = http.post("/v1/calls", json=body)
    assert response.status_code == 422, response.text
    assert response.json() == {"ok": False, "error": error}


# -- nothing is done ------------------------------------------------------------------------


def snapshot(stack: Stack) -> dict[str, Any]:
    """Every table a submission writes, every queue it publishes to, every bucket and
    cache entry in Redis."""
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.reading() as conn:
            rows = {
                table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
                for table in (calls, approval_requests, approval_decisions, audit_log, batches)
            }
    finally:
        runtime.close()
    client = redis_of(stack)
    try:
        return {
            "rows": rows,
            "queues": {queue: client.llen(prefix(stack) + queue) for queue in ALL_QUEUES},
            "buckets": {
                key: client.hgetall(key)
                for key in client.scan_iter(f"{prefix(stack)}{RATE_BUCKET}:*")
            },
            "cached": sorted(client.scan_iter(f"{prefix(stack)}{RESULT_CACHE}:*")),
        }
    finally:
        client.close()


def test_dry_runs_store_publish_audit_and_take_nothing(stack: Stack, tmp_path: Path) -> None:
    bucket = f"{prefix(stack)}{RATE_BUCKET}:limited_ledger"
    client = redis_of(stack)
    # A bucket of our own, with no expiry, so any write to it would show.
    client.hset(bucket, mapping={"tokens": "1.5", "ts": "1"})
    deep: dict[str, Any] = {}
    for _ in range(70):
        deep = {"a": deep}
    bodies: list[dict[str, Any]] = [
        {"tool": "echo", "args": {"x": 1}},
        {"tool": "echo", "args": {"x": 1}, "idempotency_key": f"dry-{uuid.uuid4().hex}"},
        {"tool": "high_echo", "args": {"n": 1}},
        {"tool": "two_man", "args": {"n": 1}},
        {"tool": "finance_wire", "args": {"n": 1}},
        {"tool": "ehco", "args": {}},
        {"tool": "strict", "args": {"to": 1}},
        {"tool": "echo", "args": deep},
        {"tool": "limited_ledger", "args": {"path": str(tmp_path / "ledger")}},
        {"tool": "cached_ledger", "args": {"path": str(tmp_path / "ledger")}},
        {"capability": "search.web", "args": {"q": "x"}},
        {"capability": "no.such", "args": {}},
    ]
    try:
        before = snapshot(stack)
        with stack.client() as http:
            answers = [dry_run(http, body) for body in bodies]
        after = snapshot(stack)
    finally:
        client.delete(bucket)
        client.close()
    assert [a["outcome"] for a in answers] == [
        *["queued"] * 2,
        *["pending"] * 3,
        *["refused"] * 3,
        *["queued"] * 3,
        "refused",
    ]
    assert after == before
    assert before["buckets"][bucket.encode()] == {b"tokens": b"1.5", b"ts": b"1"}
    assert not (tmp_path / "ledger").exists()  # no handler ran


# -- the CLI and the clients ------------------------------------------------------------------


def test_call_dry_run_prints_the_explanation(stack: Stack, tmp_path: Path) -> None:
    env = stack_cli_env(stack)
    agent = stack.keys["agent"]
    gated = toolrouter(
        "call",
        "high_echo",
        "--args",
        '{"n": 1}',
        "--dry-run",
        "--key",
        agent,
        env=env,
        cwd=tmp_path,
    )
    assert gated.returncode == 0, gated.stderr
    body = json.loads(gated.stdout)
    assert body["dry_run"] is True and body["outcome"] == "pending"
    assert body["approval"]["approvers"] == ["approver"]
    typo = toolrouter("call", "ehco", "--dry-run", "--key", agent, env=env, cwd=tmp_path)
    assert typo.returncode == 1
    assert json.loads(typo.stdout)["refused"]["error"] == "unknown tool: ehco"
    assert typo.stderr.strip().startswith("did you mean: echo"), typo.stderr


def test_the_clients_explain(stack: Stack) -> None:
    with Client(stack.base_url, stack.keys["agent"]) as client:
        gated = client.explain("finance_wire", {"n": 1})
        unknown = client.explain("ehco")

    async def explain_async() -> dict[str, Any]:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as client:
            return await client.explain("two_man", {"n": 1})

    two_man = asyncio.run(explain_async())
    assert gated["outcome"] == "pending" and gated["approval"]["approvers"] == ["finance"]
    assert unknown["refused"]["did_you_mean"] == ["echo"]
    assert two_man["approval"]["approvals_required"] == 2
