"""A fallback runs without a request of its own, so a tool reached as one must still pass
its rules: ``deny_if`` refuses it, and arguments its rules would gate or cannot read
skip it (``tests/rules_fallbacks.yaml``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ..support.audit import audit_events
from ..support.calls import submit
from ..support.launcher import REPO
from ..support.stack import Stack, own_stack

CONFIG = REPO / "tests" / "rules_fallbacks.yaml"
REDIS_DB = 10


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("rules-fallbacks")
    with own_stack(
        state_dir,
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"], "operator": ["operator"]},
        TOOLROUTER_CONFIG=str(CONFIG),
        PYTHON=sys.executable,
    ) as stack:
        stack.start_api()
        stack.start_worker(concurrency=1)
        yield stack


def pay(stack: Stack, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with stack.client() as http:
        return submit(http, tool, args, wait_s=60)


def test_a_fallback_whose_deny_if_holds_does_not_run(stack: Stack) -> None:
    """Nor does it answer: the call fails with its own tool's error, and says why the
    fallback was not tried."""
    answer = pay(stack, "pay_primary", {"to": "blocked-account", "amount": 5})
    assert answer["status"] == "failed", answer
    assert answer["error"] == (
        "insufficient funds; fallback pay_guarded not tried: "
        "denied by rule deny_if: transfers to blocked accounts are refused"
    )
    assert answer["error_type"] == "ValueError"
    assert answer.get("answered_by") in (None, "pay_primary"), answer
    assert "ok" not in [event for event, _ in audit_events(stack, answer["call_id"])]


def test_a_fallback_whose_rules_cannot_be_read_does_not_run(stack: Stack) -> None:
    # A failing deny_if gates a call, and a fallback has no approval to be gated by.
    answer = pay(stack, "pay_primary", {"to": ["blocked-account"], "amount": 5})
    assert answer["status"] == "failed", answer
    assert answer["error"].startswith("insufficient funds; fallback pay_guarded not tried: "), (
        answer
    )
    assert "would need approval for these arguments; a fallback has none" in answer["error"]
    assert answer["error_type"] == "ValueError"


def test_a_fallback_its_rules_let_through_runs(stack: Stack) -> None:
    answer = pay(stack, "pay_primary", {"to": "bob", "amount": 5})
    assert answer["status"] == "succeeded", answer
    assert answer["answered_by"] == "pay_guarded"


def dry_run(stack: Stack, args: dict[str, Any]) -> dict[str, Any]:
    with stack.client() as http:
        response = http.post(
            "/v1/calls", json={"tool": "pay_primary", "args": args, "dry_run": True}
        )
    assert response.status_code == 200, response.text
    return response.json()


def test_a_dry_run_names_the_fallback_the_worker_would_skip_and_why(stack: Stack) -> None:
    """The explanation splits the chain as the worker takes it, by the same rules."""
    denied = dry_run(stack, {"to": "blocked-account", "amount": 5})
    assert denied["fallbacks"] == []
    assert denied["fallbacks_not_tried"] == [
        {
            "tool": "pay_guarded",
            "why": "denied by rule deny_if: transfers to blocked accounts are refused",
        }
    ]
    unreadable = dry_run(stack, {"to": ["blocked-account"], "amount": 5})
    assert unreadable["fallbacks"] == []
    assert [skip["tool"] for skip in unreadable["fallbacks_not_tried"]] == ["pay_guarded"]
    assert unreadable["fallbacks_not_tried"][0]["why"].endswith(
        "would need approval for these arguments; a fallback has none"
    )
    allowed = dry_run(stack, {"to": "bob", "amount": 5})
    assert allowed["fallbacks"] == ["pay_guarded"]
    assert allowed["fallbacks_not_tried"] == []
