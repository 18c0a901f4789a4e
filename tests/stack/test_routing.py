"""Tool selection: rankings on a fixed catalogue, /v1/route, calls by capability, fallbacks."""

from __future__ import annotations

import json

import pytest

from router.errors import BadRequest, ConfigError
from router.tools.config import parse_config
from router.tools.registry import ToolRegistry
from router.tools.routing import Candidate, Strategy, route, strategy_named

from ..support.stack import Stack

CATALOGUE = """
tools:
  - {name: web_search, handler: "tests.fixture_tools:echo", cost_per_call: 0.02, timeout_s: 10,
     description: Search the web for current news and pages, capabilities: [search.web]}
  - {name: cheap_search, handler: "tests.fixture_tools:echo", cost_per_call: 0.001,
     timeout_s: 5, description: A cheaper index of web pages, capabilities: [search.web]}
  - {name: calculator, handler: "tests.fixture_tools:echo", cost_per_call: 0,
     description: Calculate sums averages and other math, capabilities: [math.eval]}
  - {name: file_reader, handler: "tests.fixture_tools:echo",
     description: Read and extract text from attached documents, capabilities: [files.read]}
"""
ROUTING = r"""
routing:
  rules:
    - {pattern: '\b(calculate|sum|average)\b', tool: calculator, priority: 90,
       description: use code for calculations}
    - {pattern: '\b(latest|today|news)\b', tool: web_search, priority: 100,
       description: current information needs search}
"""


@pytest.fixture(scope="module")
def catalogue() -> ToolRegistry:
    return ToolRegistry.from_config(parse_config(CATALOGUE, file="catalogue.yaml", env={}))


def names(candidates: list[Candidate]) -> list[str]:
    return [c.tool for c in candidates]


def test_text_strategies_rank_the_catalogue(catalogue: ToolRegistry) -> None:
    lexical = route(catalogue, task="search the web for news", strategy=Strategy.LEXICAL)
    assert names(lexical)[:2] == ["web_search", "cheap_search"]
    assert names(route(catalogue, task="calculate the average"))[0] == "calculator"
    assert names(route(catalogue, task="extract text from this document"))[0] == "file_reader"
    assert route(catalogue, task="zzz qqq", strategy=Strategy.LEXICAL) == []


def test_capability_filters_and_cost_ranks_within_the_budget(catalogue: ToolRegistry) -> None:
    by_cost = route(catalogue, task="", strategy=Strategy.COST, capability="search.web")
    assert names(by_cost) == ["cheap_search", "web_search"]
    assert "cost 0.001" in by_cost[0].reason
    tight = route(
        catalogue,
        task="",
        strategy=Strategy.COST,
        capability="search.web",
        budget={"remaining": 0.01},
    )
    assert names(tight) == ["cheap_search"]
    ranked = route(
        catalogue,
        task="",
        strategy=Strategy.CAPABILITY,
        capability="search.web",
        success={"web_search": 0.99, "cheap_search": 0.5},
    )
    assert names(ranked) == ["web_search", "cheap_search"]


def test_rules_apply_in_priority_order(catalogue: ToolRegistry) -> None:
    rules = list(parse_config(CATALOGUE + ROUTING, file="catalogue.yaml", env={}).routing.rules)
    assert names(
        route(catalogue, task="calculate today's news sum", strategy=Strategy.RULES, rules=rules)
    ) == ["web_search", "calculator"]
    assert route(catalogue, task="hello", strategy=Strategy.RULES, rules=rules) == []


def test_llm_needs_the_ranker_and_unknown_strategies_are_refused(
    catalogue: ToolRegistry,
) -> None:
    with pytest.raises(BadRequest, match="needs the ranker"):
        route(catalogue, task="x", strategy=Strategy.LLM)
    with pytest.raises(BadRequest, match="unknown strategy: magic"):
        strategy_named("magic")


def test_a_gated_fallback_is_a_config_error() -> None:
    text = (
        'tools:\n  - {name: a, handler: "tests.fixture_tools:echo", fallbacks: [b]}\n'
        '  - {name: b, handler: "tests.fixture_tools:echo", risk: high}\n'
    )
    with pytest.raises(ConfigError, match="gated tools cannot be fallbacks"):
        ToolRegistry.from_config(parse_config(text, file="t.yaml", env={}), file="t.yaml")


def test_route_endpoint_ranks_the_stack_tools(stack: Stack) -> None:
    with stack.client("agent") as http:
        body = http.post("/v1/route", json={"task": "backup web search"}).json()
        assert body["ok"] is True and body["strategy"] == "hybrid"
        assert body["candidates"][0]["tool"] == "search_backup"
        assert body["candidates"][0]["reason"].startswith("matches backup, search, web; ")
        for strategy in ("lexical", "semantic"):
            named = http.post(
                "/v1/route", json={"task": "backup web search", "strategy": strategy, "limit": 3}
            ).json()
            assert named["strategy"] == strategy and len(named["candidates"]) <= 3
            assert named["candidates"][0]["tool"] == "search_backup"
        refused = http.post("/v1/route", json={"task": "x", "strategy": "llm"})
        assert refused.status_code == 422
        assert refused.json()["error"] == (
            "strategy llm is not available: no LLM endpoint is configured"
            " (TOOLROUTER_ROUTE_LLM_URL)"
        )
        unknown = http.post("/v1/route", json={"task": "x", "strategy": "magic"})
        assert unknown.status_code == 422


def test_a_route_by_capability_ranks_as_a_call_by_capability_chooses(stack: Stack) -> None:
    with stack.client("agent") as http:
        routed = http.post("/v1/route", json={"capability": "search.web"}).json()
        explained = http.post(
            "/v1/calls", json={"capability": "search.web", "args": {"q": "z"}, "dry_run": True}
        ).json()
    assert routed["strategy"] == "capability"
    ranking = [c["tool"] for c in explained["capability"]["ranking"]]
    assert [c["tool"] for c in routed["candidates"]] == ranking
    assert set(ranking) >= {"search_primary", "search_backup"}


def test_a_failed_call_falls_back_and_names_the_tool_that_answered(stack: Stack) -> None:
    with stack.client("agent") as http:
        result = http.post(
            "/v1/calls", json={"tool": "search_primary", "args": {"q": "x"}, "wait_s": 20}
        ).json()
    assert result["ok"] is True, result
    assert (result["tool"], result["answered_by"]) == ("search_primary", "search_backup")
    assert result["value"] == {"q": "x"}
    with stack.client("operator") as http:
        rows = http.get("/v1/audit", params={"call_id": result["call_id"]}).json()["rows"]
    assert [(r["event"], r["tool"]) for r in rows] == [
        ("queued", "search_primary"),
        ("error", "search_primary"),
        ("ok", "search_backup"),
    ]
    assert rows[1]["detail"]["fallback"] == "search_backup"
    # Each tool's figures are its own runs: the call's success is the backup's, not the
    # primary's, which would otherwise stay first in every ranking by success.
    with stack.client("agent") as http:
        primary, backup = (
            http.get(f"/v1/tools/{name}/stats").json()["stats"]
            for name in ("search_primary", "search_backup")
        )
    assert primary["success_rate"] == 0 and primary["errors_by_type"]["ValueError"] >= 1
    # Both ran: the primary's latency is its own failed runs', not an estimate.
    assert primary["latency_p50_s"] is not None and backup["latency_p50_s"] is not None
    assert backup["success_rate"] == 1


def test_a_call_by_capability_runs_the_best_tool_and_falls_back_along_the_ranking(
    stack: Stack,
) -> None:
    with stack.client("agent") as http:
        result = http.post(
            "/v1/calls", json={"capability": "search.web", "args": {"q": "y"}, "wait_s": 20}
        ).json()
        assert result["ok"] is True, result
        assert "search_backup" in (result["tool"], result.get("answered_by"))
        none = http.post("/v1/calls", json={"capability": "teleport", "args": {}}).json()
        assert none["status"] == "rejected"
        assert none["error"] == "no tool declares capability teleport"
        both = http.post("/v1/calls", json={"capability": "x", "tool": "echo", "args": {}})
        assert both.status_code == 422


def test_route_refuses_what_is_not_text_or_not_a_finite_number(stack: Stack) -> None:
    with stack.client("agent") as http:
        surrogate = http.post(
            "/v1/route",
            content=b'{"task": "weather \\ud800 now"}',
            headers={"Content-Type": "application/json"},
        )
        assert surrogate.status_code == 422, surrogate.text
        assert surrogate.json()["error"] == "task must be text: it holds a lone surrogate"
        for budget in ({"cost_weight": "nan"}, {"max": 10**400}, {"latency_weight": 1e308 * 10}):
            body = json.dumps({"strategy": "cost", "budget": budget})
            answer = http.post(
                "/v1/route", content=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 422, (budget, answer.text)
        # The connection still serves: nothing above broke it.
        assert http.post("/v1/route", json={"task": "echo"}).status_code == 200


def test_a_route_with_nothing_to_rank_by_is_refused(stack: Stack) -> None:
    refused = {
        "hybrid": [{}, {"task": " \n"}, {"task": None}, {"limit": 3}],
        "lexical": [{"strategy": "lexical"}],
        "semantic": [{"strategy": "semantic", "task": ""}],
        "rules": [{"strategy": "rules"}],
    }
    with stack.client("agent") as http:
        for strategy, bodies in refused.items():
            for body in bodies:
                answer = http.post("/v1/route", json=body)
                assert answer.status_code == 422, (body, answer.text)
                expected = f"strategy {strategy} needs a task or a capability"
                assert answer.json() == {"ok": False, "error": expected}, body
        # What ranks without a task still does: by cost, or a capability's tools.
        for body in ({"strategy": "cost"}, {"capability": "search.web"}):
            answer = http.post("/v1/route", json=body)
            assert answer.status_code == 200, (body, answer.text)
            assert answer.json()["candidates"], body


@pytest.mark.parametrize("strategy", ["cost", "lexical"])
def test_a_budget_is_checked_whatever_the_strategy(stack: Stack, strategy: str) -> None:
    refused = {
        "budget fields must be numbers": [{"remaining": "1"}, {"remaining": True}],
        "unknown budget field: colour": [{"colour": 1}],
        "budget max must be above 0": [{"max": 0}],
        "budget cost_weight must be between 0 and 1000": [
            {"cost_weight": 1e308, "latency_weight": 1e308},
            {"cost_weight": -1},
        ],
    }
    with stack.client("agent") as http:
        for message, budgets in refused.items():
            for budget in budgets:
                body = {"task": "echo", "strategy": strategy, "budget": budget}
                answer = http.post("/v1/route", json=body)
                assert answer.status_code == 422, (budget, answer.text)
                assert answer.json()["error"] == message, (budget, answer.text)
        fine = {"task": "echo", "strategy": strategy, "budget": {"remaining": 1, "max": 2}}
        answer = http.post("/v1/route", json=fine)
        assert answer.status_code == 200, answer.text
        assert all(c["score"] is not None for c in answer.json()["candidates"])
