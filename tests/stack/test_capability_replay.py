"""A call by capability with an idempotency key, sent again after the ranking has moved,
is the one call it made, not a 409 for the very request that made it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def ranked_stack(
    redis_base: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    config = tmp_path / "toolrouter.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    (tmp_path / "state").mkdir()
    with own_stack(
        tmp_path / "state",
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"]},
        TOOLROUTER_CONFIG=str(config),
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
