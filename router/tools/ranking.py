"""Ranking tools for a task, with what has been measured of them: the one ranking that
``POST /v1/route`` answers with and that calls by capability fall back along."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..clock import Clock, wall_clock_ms
from ..db.store import Store
from ..errors import BadRequest
from . import routing, stats
from .registry import ToolRegistry
from .routing import Rule
from .selection.candidates import TEXT_STRATEGIES, Ranking, Strategy
from .selection.index import ToolIndex
from .selection.llm import LlmFailed, LlmSelector
from .selection.semantic import SemanticUnavailable

log = logging.getLogger(__name__)
# Strategies that weigh each tool's measured latency and success rate.
MEASURED_STRATEGIES = frozenset({Strategy.COST, Strategy.CAPABILITY})
STATS_TTL_MS = 5000
LLM_OFF = "strategy llm is not available: no LLM endpoint is configured (TOOLROUTER_ROUTE_LLM_URL)"


class Ranker:
    """Built once per registry: the text index is made here, at load."""

    def __init__(
        self,
        store: Store,
        registry: ToolRegistry,
        rules: Sequence[Rule],
        *,
        default: Strategy = routing.DEFAULT_STRATEGY,
        llm: LlmSelector | None = None,
        shortlist: int = 20,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.store, self.registry, self.rules = store, registry, rules
        self.clock = clock
        # Per tool: when its figures were read, its p50 latency and its success rate.
        self._stats: dict[str, tuple[int, float | None, float | None]] = {}
        self.default, self.llm, self.shortlist = default, llm, shortlist
        self.index = ToolIndex(list(registry))

    def warm(self) -> None:
        """Loads the embedding model and embeds every tool now, when the default needs them,
        rather than in the first request's time. Never raises: ranking reports failures."""
        if self.default in (Strategy.HYBRID, Strategy.SEMANTIC):
            try:
                self.index.semantic_index()
            except BadRequest as exc:
                log.warning("tool selection: %s", exc)

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()

    def measured(self, names: list[str]) -> tuple[dict[str, float | None], dict[str, float | None]]:
        """Each named tool's measured p50 latency and success rate, from the audit log, at
        most ``STATS_TTL_MS`` old: they move slowly, and reading them costs a query a tool."""
        now = self.clock()
        stale = [
            n for n in names if n not in self._stats or now - self._stats[n][0] >= STATS_TTL_MS
        ]
        if stale:
            with self.store.reading() as conn:
                for name in stale:
                    runs = stats.run_figures(conn, name)
                    self._stats[name] = (now, runs.latency_s(0.50), runs.success_rate)
        figures = {name: self._stats[name] for name in names}
        return (
            {name: latency for name, (_, latency, _) in figures.items()},
            {name: success for name, (_, _, success) in figures.items()},
        )

    def rank(
        self,
        *,
        task: str = "",
        strategy: str | None = None,
        capability: str | None = None,
        budget: dict[str, Any] | None = None,
        limit: int = 100,
    ) -> Ranking:
        """Unnamed, the strategy is the default for a task, and ``capability`` for a
        capability alone (a call by capability has no task): so a route and a call by
        capability given the same fields rank alike. A ``budget`` is checked whatever the
        strategy (``routing.check_budget``)."""
        if budget is not None:
            routing.check_budget(budget)
        if strategy is None and not task.strip() and capability is not None:
            chosen = Strategy.CAPABILITY
        else:
            chosen = self.default if strategy is None else routing.strategy_named(strategy)
        if chosen in TEXT_STRATEGIES and not task.strip() and capability is None:
            # Ranked by nothing, every tool would score alike: an answer that means nothing.
            raise BadRequest(f"strategy {chosen.value} needs a task or a capability")
        if chosen == Strategy.LLM:
            return self._by_llm(task, capability, limit)
        latency: dict[str, float | None] = {}
        success: dict[str, float | None] = {}
        if chosen in MEASURED_STRATEGIES:
            latency, success = self.measured(
                [t.name for t in self.registry if capability in (None, *t.spec.capabilities)]
            )
        try:
            candidates = routing.route(
                self.registry,
                task=task,
                strategy=chosen,
                capability=capability,
                budget=budget,
                rules=self.rules,
                latency_s=latency,
                success=success,
                index=self.index,
                limit=limit,
            )
        except SemanticUnavailable as exc:
            if chosen != Strategy.HYBRID:
                raise
            lexical = self.index.lexical(
                task, allowed=_allowed(self.registry, capability), limit=limit
            )
            return Ranking(Strategy.LEXICAL, lexical, fallback=f"{exc}; ranked by lexical instead")
        return Ranking(chosen, candidates)

    def _by_llm(self, task: str, capability: str | None, limit: int) -> Ranking:
        if self.llm is None:
            raise BadRequest(LLM_OFF)
        # Unnamed, as a route would rank it: by capability when there is no task.
        shortlist = self.rank(task=task, capability=capability, limit=max(limit, self.shortlist))
        tools = [self.registry.get(c.tool) for c in shortlist.candidates[: self.shortlist]]
        # Whatever the endpoint sends, the route answers: a hostile model only causes a fallback.
        try:
            chosen = self.llm.rerank(task, [t for t in tools if t is not None])
        except Exception as exc:
            why = (
                str(exc)
                if isinstance(exc, LlmFailed)
                else f"unreadable answer ({type(exc).__name__})"
            )
            used = shortlist.strategy.value
            reason = f"strategy llm failed: {why}; ranked by {used} instead"
            return Ranking(shortlist.strategy, shortlist.candidates, fallback=reason)
        # Past the shortlist, the default's order stands: the model saw none of those.
        return Ranking(Strategy.LLM, chosen + shortlist.candidates[self.shortlist :])


def _allowed(registry: ToolRegistry, capability: str | None) -> frozenset[str] | None:
    if capability is None:
        return None
    return frozenset(t.name for t in registry if capability in t.spec.capabilities)
