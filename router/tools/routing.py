"""Choosing tools for a task (``POST /v1/route``, calls by capability).

Strategies, each a ranking with a score and a reason per candidate:

- ``lexical`` (default): BM25 over each tool's name, description, category and
  capabilities, against the task's words.
- ``capability``: the tools that declare the capability, most reliable first.
- ``cost``: cost and measured latency within a budget, weights configurable.
- ``rules``: the config's priority-ordered ``routing.rules`` patterns.
- ``semantic`` and ``llm`` are not built: asking for them is a clear error, never a
  quiet substitute.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest
from .registry import Tool, ToolRegistry

STRATEGIES = ("lexical", "capability", "cost", "rules")
UNAVAILABLE = {
    "semantic": "strategy semantic is not available: no local embedding model is installed",
    "llm": "strategy llm is not available: no LLM endpoint is configured",
}
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Candidate:
    tool: str
    score: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "score": round(self.score, 4), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str]
    tool: str
    priority: int
    description: str


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("_", " ").replace("-", " ").replace(".", " "))


def _document(tool: Tool) -> list[str]:
    spec = tool.spec
    return words(" ".join([spec.name, spec.description, spec.category, *spec.capabilities]))


def bm25(task: str, tools: list[Tool], k1: float = 1.5, b: float = 0.75) -> list[Candidate]:
    docs = {tool.name: _document(tool) for tool in tools}
    if not docs:
        return []
    average = sum(len(d) for d in docs.values()) / len(docs) or 1.0
    frequency = Counter(term for d in docs.values() for term in set(d))
    query = words(task)
    ranked = []
    for name, doc in docs.items():
        counts = Counter(doc)
        score, matched = 0.0, []
        for term in query:
            if term not in counts:
                continue
            idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            tf = counts[term]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / average))
            matched.append(term)
        if score > 0:
            ranked.append(Candidate(name, score, "matches " + ", ".join(sorted(set(matched)))))
    return sorted(ranked, key=lambda c: (-c.score, c.tool))


def route(
    registry: ToolRegistry,
    *,
    task: str,
    strategy: str = "lexical",
    capability: str | None = None,
    budget: dict[str, Any] | None = None,
    rules: list[Rule] | None = None,
    latency_s: dict[str, float | None] | None = None,
    success: dict[str, float | None] | None = None,
) -> list[Candidate]:
    """Ranked candidates; ``BadRequest`` for an unknown or unavailable strategy."""
    if strategy in UNAVAILABLE:
        raise BadRequest(UNAVAILABLE[strategy])
    if strategy not in STRATEGIES:
        raise BadRequest(f"unknown strategy: {strategy[:40]}; use one of {', '.join(STRATEGIES)}")
    tools = [t for t in registry if capability is None or capability in t.spec.capabilities]
    if strategy == "lexical":
        return bm25(task, tools)
    if strategy == "capability":
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
    if strategy == "cost":
        return _by_cost(tools, budget or {}, latency_s or {})
    matched = []
    for rule in sorted(rules or [], key=lambda r: -r.priority):
        if rule.pattern.search(task) and rule.tool in {t.name for t in tools}:
            matched.append(
                Candidate(
                    rule.tool,
                    float(rule.priority),
                    rule.description or f"rule {rule.pattern.pattern!r}",
                )
            )
    return matched


def _by_cost(
    tools: list[Tool], budget: dict[str, Any], latency_s: dict[str, float | None]
) -> list[Candidate]:
    """Lower cost and latency score higher; tools over the remaining budget are left out."""
    try:
        remaining = float(budget.get("remaining", math.inf))
        ceiling = float(budget.get("max", max([t.spec.cost_per_call for t in tools] + [1.0])))
        cost_weight = float(budget.get("cost_weight", 0.5))
        latency_weight = float(budget.get("latency_weight", 0.5))
    except (TypeError, ValueError):
        raise BadRequest("budget fields must be numbers") from None
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


def parse_rules(raw: list[dict[str, Any]], *, file: str) -> list[Rule]:
    """``routing.rules`` from the config; a bad pattern is a config error."""
    from ..errors import ConfigError

    rules = []
    for index, item in enumerate(raw):
        try:
            rules.append(
                Rule(
                    pattern=re.compile(str(item["pattern"]), re.IGNORECASE),
                    tool=str(item["tool"]),
                    priority=int(item.get("priority", 0)),
                    description=str(item.get("description", "")),
                )
            )
        except (KeyError, re.error, TypeError, ValueError) as exc:
            raise ConfigError(f"routing.rules[{index}]: {exc}", file=file) from None
    return rules
