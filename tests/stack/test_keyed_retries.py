"""A keyed call sent again is the one call it made, whatever moved since: the ranking of
its capability, or the config (its tool removed, its rules or schema changed), which would
refuse it as a new call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..support.stack import Stack, own_stack
from ..support.waiting import wait_for

REDIS_DB = 10
# Unmeasured tools rank alike and then by name: alpha first, until its failures count.
CONFIG = """
tools:
  - {name: alpha, handler: "tests.fixture_tools:raise_value_error", risk: low,
     capabilities: [cap.x]}
  - {name: beta, handler: "tests.fixture_tools:echo", risk: low, capabilities: [cap.x]}
"""


# The same deployment after a config change: `retired` is gone, `strict` refuses what it
# ran, `shaped` takes other arguments.
BEFORE = """
tools:
  - {name: retired, handler: "tests.fixture_tools:echo", risk: low}
  - {name: strict, handler: "tests.fixture_tools:echo", risk: low}
  - {name: shaped, handler: "tests.fixture_tools:echo", risk: low, capabilities: [cap.y]}
"""
AFTER = """
tools:
  - name: strict
    handler: "tests.fixture_tools:echo"
    risk: low
    deny_if: "args.n > 1"
    deny_reason: "n is capped at 1"
  - name: shaped
    handler: "tests.fixture_tools:echo"
    risk: low
    capabilities: [cap.y]
    input_schema: {type: object, required: [m]}
  - {name: other, handler: "tests.fixture_tools:echo", risk: low, capabilities: [cap.y]}
"""


@pytest.fixture
def ranked_stack(
    redis_base: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    yield from stack_of(CONFIG, redis_base, tmp_path, request)


@pytest.fixture
def changing_stack(
    redis_base: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    yield from stack_of(BEFORE, redis_base, tmp_path, request)


def stack_of(
    tools: str, redis_base: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    with own_stack(
        tmp_path, f"{redis_base}/{REDIS_DB}", request, keys={"agent": ["agent"]}, tools=tools
    ) as stack:
        stack.start_api()
        stack.start_worker(concurrency=1)
        yield stack


def test_a_keyed_call_by_capability_replays_after_the_ranking_moves(
    ranked_stack: Stack,
) -> None:
    body = {"capability": "cap.x", "args": {"q": 1}, "idempotency_key": "k-1", "wait_s": 60}
    with ranked_stack.client() as http:
        first = http.post("/v1/calls", json=body).json()
        assert first["tool"] == "alpha" and first["answered_by"] == "beta", first

        def best() -> bool:
            dry = {"capability": "cap.x", "args": {"q": 1}, "dry_run": True}
            ranking = http.post("/v1/calls", json=dry).json()["capability"]["ranking"]
            return ranking[0]["tool"] == "beta"

        wait_for(best, 60, "alpha's failure reordering the ranking")
        again = http.post("/v1/calls", json=body)
        assert again.status_code == 200, again.text
        assert again.json() == first
        dry = http.post("/v1/calls", json={**body, "dry_run": True}).json()
        assert dry["tool"] == "alpha" and dry["replay"]["call_id"] == first["call_id"], dry
        other = http.post("/v1/calls", json={**body, "args": {"q": 2}})
        assert other.status_code == 409, other.text


def test_a_keyed_retry_is_its_call_after_the_config_changed(changing_stack: Stack) -> None:
    stack = changing_stack
    retired = {"tool": "retired", "args": {"n": 2}, "idempotency_key": "r-1", "wait_s": 60}
    strict = {"tool": "strict", "args": {"n": 2}, "idempotency_key": "s-1", "wait_s": 60}
    by_capability = {"capability": "cap.y", "args": {"n": 3}, "idempotency_key": "c-1"}
    batch = [
        {"tool": "retired", "args": {"n": 5}},
        {"tool": "strict", "args": {"n": 6}, "idempotency_key": "s-b"},
    ]
    with stack.client() as http:
        made = [http.post("/v1/calls", json=body).json() for body in (retired, strict)]
        made.append(http.post("/v1/calls", json={**by_capability, "wait_s": 60}).json())
        sent = batch_of(http, batch, "b-1")
    assert [call["status"] for call in made] == ["succeeded"] * 3, made
    assert (sent["accepted"], sent["rejected"]) == (2, []), sent
    stack.stop("api")
    Path(stack.env["TOOLROUTER_CONFIG"]).write_text(AFTER, encoding="utf-8")
    stack.start_api()
    with stack.client() as http:
        again = [http.post("/v1/calls", json=body) for body in (retired, strict)]
        again.append(http.post("/v1/calls", json={**by_capability, "wait_s": 60}))
        assert [r.status_code for r in again] == [200] * 3, [r.text for r in again]
        assert [r.json() for r in again] == made
        dry = http.post("/v1/calls", json={**retired, "dry_run": True}).json()
        assert dry["outcome"] == "replayed" and dry["replay"] == made[0], dry
        dry = http.post("/v1/calls", json={**by_capability, "dry_run": True}).json()
        assert dry["outcome"] == "replayed" and dry["replay"] == made[2], dry
        # Another call under a used key is a conflict; a new key is refused as a new call.
        other = http.post("/v1/calls", json={**retired, "args": {"n": 9}})
        assert other.status_code == 409, other.text
        fresh = http.post("/v1/calls", json={**retired, "idempotency_key": "r-2"}).json()
        assert fresh["status"] == "rejected" and fresh["error"] == "unknown tool: retired"
        denied = http.post("/v1/calls", json={**strict, "idempotency_key": "s-2"}).json()
        assert denied["status"] == "denied", denied
        other = http.post("/v1/calls", json={**by_capability, "args": {"n": 4}})
        assert other.status_code == 409, other.text
        moved = http.post("/v1/calls", json={**by_capability, "idempotency_key": "c-2"})
        assert moved.json()["tool"] == "other", moved.text
        # A batch sent again under its key, and calls under their own keys in another.
        again_batch = batch_of(http, batch, "b-1")
        assert again_batch["batch_id"] == sent["batch_id"], again_batch
        assert (again_batch["accepted"], again_batch["replayed"]) == (0, 2), again_batch
        assert again_batch["rejected"] == [], again_batch
        elsewhere = batch_of(
            http,
            [*batch, {**batch[1], "args": {"n": 7}}, {**batch[1], "idempotency_key": "s-3"}],
            None,
        )
        assert (elsewhere["accepted"], elsewhere["replayed"]) == (0, 1), elsewhere
        assert elsewhere["rejected"] == [
            {"index": 0, "error": "unknown tool: retired"},
            {"index": 2, "error": "idempotency key reused with different arguments"},
            {"index": 3, "error": "denied by rule deny_if: n is capped at 1"},
        ], elsewhere


def batch_of(http: httpx.Client, calls: list[dict[str, object]], key: str | None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    params = {"offset": 0} if key else {}
    response = http.post("/v1/batches", json={"calls": calls}, headers=headers, params=params)
    assert response.status_code == 200, response.text
    return response.json()
