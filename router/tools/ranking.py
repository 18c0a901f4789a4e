"""Ranking tools for a task, with what has been measured of them: the one ranking that
``POST /v1/route`` answers with and that calls by capability fall back along."""

from __future__ import annotations

from typing import Any

from ..db.store import Store
from . import routing, stats
from .registry import ToolRegistry
from .routing import Candidate, Rule

DEFAULT_STRATEGY = "lexical"
# Strategies that weigh each tool's measured latency and success rate.
MEASURED_STRATEGIES = frozenset({"cost", "capability"})


class Ranker:
    def __init__(self, store: Store, registry: ToolRegistry, rules: list[Rule]) -> None:
        self.store, self.registry, self.rules = store, registry, rules

    def measured(self) -> tuple[dict[str, float | None], dict[str, float | None]]:
        """Each tool's measured p50 latency and success rate, from the database."""
        latency: dict[str, float | None] = {}
        success: dict[str, float | None] = {}
        with self.store.reading() as conn:
            for tool in self.registry:
                row = stats.tool_stats(conn, self.registry, tool.name)
                latency[tool.name], success[tool.name] = row["latency_p50_s"], row["success_rate"]
        return latency, success

    def rank(
        self,
        *,
        task: str = "",
        strategy: str | None = None,
        capability: str | None = None,
        budget: dict[str, Any] | None = None,
    ) -> list[Candidate]:
        chosen = strategy or DEFAULT_STRATEGY
        latency, success = self.measured() if chosen in MEASURED_STRATEGIES else ({}, {})
        return routing.route(
            self.registry,
            task=task,
            strategy=chosen,
            capability=capability,
            budget=budget,
            rules=self.rules,
            latency_s=latency,
            success=success,
        )
