"""How often each strategy ranks the labelled tool first, in its first five, and the mean
reciprocal rank (over the first 100; a tool not among them counts 0)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from router.tools.registry import ToolRegistry
from router.tools.selection.index import ToolIndex

from .baseline import PlainBM25
from .dataset import Request

DEPTH = 100
BASELINE = "plain BM25 (before)"
STRATEGIES = (BASELINE, "lexical", "semantic", "hybrid")

Rank = Callable[[str], list[str]]


def rankers(registry: ToolRegistry, index: ToolIndex) -> dict[str, Rank]:
    """Each strategy as task → tool names, best first (at most ``DEPTH``)."""
    plain = PlainBM25(list(registry))
    return {
        BASELINE: lambda task: [c.tool for c in plain.rank(task, DEPTH)],
        "lexical": lambda task: [c.tool for c in index.lexical(task, limit=DEPTH)],
        "semantic": lambda task: [c.tool for c in index.semantic(task, limit=DEPTH)],
        "hybrid": lambda task: [c.tool for c in index.hybrid(task, limit=DEPTH)],
    }


def rank_of(ranked: list[str], tool: str) -> int | None:
    """1-based position of ``tool``, ``None`` when absent."""
    try:
        return ranked.index(tool) + 1
    except ValueError:
        return None


def summary(ranks: Sequence[int | None]) -> dict[str, Any]:
    count = len(ranks)
    if not count:
        return {"requests": 0, "top1": 0.0, "top5": 0.0, "mrr": 0.0}
    return {
        "requests": count,
        "top1": round(sum(r == 1 for r in ranks) / count, 4),
        "top5": round(sum(r is not None and r <= 5 for r in ranks) / count, 4),
        "mrr": round(sum(1 / r for r in ranks if r is not None) / count, 4),
    }


def evaluate(rank: Rank, requests: Sequence[Request]) -> dict[str, Any]:
    """The figures over all ``requests``, by source file, and the first misses at top 1."""
    ranks: list[int | None] = []
    by_source: dict[str, list[int | None]] = defaultdict(list)
    misses: list[dict[str, Any]] = []
    for request in requests:
        ranked = rank(request.text)
        found = rank_of(ranked, request.tool)
        ranks.append(found)
        by_source[request.source].append(found)
        if found != 1 and len(misses) < 25:
            misses.append(
                {
                    "id": request.id,
                    "text": request.text[:200],
                    "label": request.tool,
                    "rank": found,
                    "first": ranked[0] if ranked else None,
                }
            )
    return {
        **summary(ranks),
        "by_source": {source: summary(r) for source, r in sorted(by_source.items())},
        "misses": misses,
    }


def accuracy(
    registry: ToolRegistry, index: ToolIndex, requests: Sequence[Request]
) -> dict[str, Any]:
    """Every strategy over ``requests``, against the tools of ``registry``."""
    ranks = rankers(registry, index)
    return {
        "tools": len(list(registry)),
        "requests": len(requests),
        "strategies": {name: evaluate(ranks[name], requests) for name in STRATEGIES},
    }
