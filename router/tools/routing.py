"""Choosing tools for a task (``POST /v1/route``, calls by capability).

Strategies, each a ranking with a score and a reason per candidate:

- ``hybrid`` (default): reciprocal rank fusion of ``lexical`` and ``semantic``.
- ``lexical``: BM25 over each tool's name, description, category, capabilities and
  parameters, stemmed, without English stop words (``selection.lexical``).
- ``semantic``: embedding similarity with a model shipped in a package (``selection.semantic``).
- ``llm``: an OpenAI-compatible chat model re-ranks the default's shortlist, when configured.
- ``capability``: the tools that declare the capability, most reliable first.
- ``cost``: cost and measured latency within a budget, weights configurable.
- ``rules``: the config's priority-ordered ``routing.rules`` patterns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import BadRequest
from ..names import echo_name
from .registry import Tool, ToolRegistry
from .routing_config import Rule
from .selection.candidates import Candidate, Strategy
from .selection.index import ToolIndex

__all__ = ["Candidate", "Rule", "Strategy", "route", "strategy_named"]

DEFAULT_STRATEGY = Strategy.HYBRID


def strategy_named(name: str | None) -> Strategy:
    """The strategy a request names; unset is the default, anything unknown a ``BadRequest``."""
    if name is None:
        return DEFAULT_STRATEGY
    try:
        return Strategy(name)
    except ValueError:
        known = ", ".join(s.value for s in Strategy)
        raise BadRequest(f"unknown strategy: {name[:40]}; use one of {known}") from None


def route(
    registry: ToolRegistry,
    *,
    task: str,
    strategy: Strategy = DEFAULT_STRATEGY,
    capability: str | None = None,
    budget: dict[str, Any] | None = None,
    rules: Sequence[Rule] = (),
    latency_s: dict[str, float | None] | None = None,
    success: dict[str, float | None] | None = None,
    index: ToolIndex | None = None,
    limit: int = 100,
) -> list[Candidate]:
    """Ranked candidates for every strategy but ``llm`` (``Ranker`` wraps that one).
    ``index`` is the registry's text index, built here when not given."""
    tools = (
        list(registry)
        if capability is None
        else [t for t in registry if capability in t.spec.capabilities]
    )
    if strategy in (Strategy.LEXICAL, Strategy.SEMANTIC, Strategy.HYBRID):
        allowed = None if capability is None else frozenset(t.name for t in tools)
        index = index or ToolIndex(tools if capability is None else list(registry))
        by_text = {
            Strategy.LEXICAL: index.lexical,
            Strategy.SEMANTIC: index.semantic,
            Strategy.HYBRID: index.hybrid,
        }[strategy]
        return by_text(task, allowed=allowed, limit=limit)
    if strategy == Strategy.CAPABILITY:
        if capability is None:
            raise BadRequest("strategy capability needs a capability")
        rates = success or {}
        ranked = []
        for t in tools:
            rate = rates.get(t.name)
            reason = f"has capability {capability}" + (
                f", success rate {rate:.0%}" if rate is not None else ", no calls measured yet"
            )
            ranked.append(Candidate(t.name, 0.5 if rate is None else rate, reason))
        return sorted(ranked, key=lambda c: (-c.score, c.tool))
    if strategy == Strategy.COST:
        return _by_cost(tools, budget or {}, latency_s or {})
    if strategy == Strategy.RULES:
        return _by_rules(task, {t.name for t in tools}, rules)
    raise BadRequest(f"strategy {strategy.value} needs the ranker")


def _by_rules(task: str, names: set[str], rules: Sequence[Rule]) -> list[Candidate]:
    matched = []
    for rule in sorted(rules, key=lambda r: -r.priority):
        if rule.regex.search(task) and rule.tool in names:
            description = rule.description or f"rule {rule.pattern!r}"
            matched.append(Candidate(rule.tool, float(rule.priority), description))
    return matched


BUDGET_FIELDS = ("remaining", "max", "cost_weight", "latency_weight")
# A weight past this would overflow a score to infinity.
MAX_WEIGHT = 1000.0


def check_budget(budget: object) -> None:
    """``BadRequest`` unless ``budget`` is ``{remaining?, max?, cost_weight?, latency_weight?}``
    of JSON numbers: finite, ``max`` above 0, weights from 0 to ``MAX_WEIGHT``. Checked
    whatever the strategy, so a budget that the ``cost`` strategy would refuse is refused
    by every other too."""
    if not isinstance(budget, dict):
        raise BadRequest("budget must be an object")
    unknown = sorted(set(budget) - set(BUDGET_FIELDS))
    if unknown:
        raise BadRequest(f"unknown budget field: {echo_name(unknown[0])}")
    for value in budget.values():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRequest("budget fields must be numbers")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer no float holds
            finite = False
        if not finite:
            raise BadRequest("budget fields must be finite numbers (remaining may be omitted)")
    if "max" in budget and not budget["max"] > 0:
        raise BadRequest("budget max must be above 0")
    for name in ("cost_weight", "latency_weight"):
        if name in budget and not 0 <= budget[name] <= MAX_WEIGHT:
            raise BadRequest(f"budget {name} must be between 0 and {MAX_WEIGHT:g}")


def _by_cost(
    tools: list[Tool], budget: dict[str, Any], latency_s: dict[str, float | None]
) -> list[Candidate]:
    """Lower cost and latency score higher; tools over the remaining budget are left out.
    ``budget`` has passed ``check_budget``."""
    remaining = float(budget.get("remaining", math.inf))
    ceiling = float(budget.get("max", max([t.spec.cost_per_call for t in tools] + [1.0])))
    cost_weight = float(budget.get("cost_weight", 0.5))
    latency_weight = float(budget.get("latency_weight", 0.5))
    ranked = []
    for tool in tools:
        cost = tool.spec.cost_per_call
        if cost > remaining:
            continue
        measured = latency_s.get(tool.name)
        latency = measured if measured is not None else tool.spec.timeout_s / 10
        score = cost_weight * (1 - cost / ceiling if ceiling else 1.0) + latency_weight * (
            1 - min(latency / 5.0, 1.0)
        )
        ranked.append(
            Candidate(
                tool.name,
                score,
                f"cost {cost:g}, latency {latency:.3f} s"
                + ("" if measured is not None else " (estimated)"),
            )
        )
    return sorted(ranked, key=lambda c: (-c.score, c.tool))
