"""The ranker on a real database: measured figures are read once per tool and reused for a
few seconds, only for the tools a ranking can return."""

from __future__ import annotations

from typing import Any

import pytest

from router.clock import FakeClock
from router.runtime import Runtime
from router.tools import stats
from router.tools.ranking import STATS_TTL_MS
from router.tools.selection import semantic
from router.tools.selection.candidates import Strategy
from router.tools.selection.semantic import UNAVAILABLE, SemanticUnavailable


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = stats.run_figures

    def counted(conn: Any, name: str) -> stats.RunFigures:
        seen.append(name)
        return real(conn, name)

    monkeypatch.setattr(stats, "run_figures", counted)
    return seen


def test_measured_figures_are_reused_until_they_are_stale(
    runtime: Runtime, clock: FakeClock, reads: list[str]
) -> None:
    ranker = runtime.ranker
    everything = sorted(t.name for t in runtime.registry)
    first = ranker.rank(strategy="cost")
    assert first.strategy == Strategy.COST and sorted(reads) == everything
    ranker.rank(strategy="cost")
    ranker.rank(capability="search.web")
    assert sorted(reads) == everything
    clock.advance(STATS_TTL_MS)
    by_capability = ranker.rank(capability="search.web")
    assert by_capability.strategy == Strategy.CAPABILITY
    assert sorted(reads[len(everything) :]) == ["search_backup", "search_primary"]
    assert {c.tool for c in by_capability.candidates} == {"search_backup", "search_primary"}


def test_hybrid_falls_back_to_lexical_when_the_model_cannot_load(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken install (the wheel's weights missing) must not refuse every route."""

    def broken() -> None:
        raise SemanticUnavailable(f"{UNAVAILABLE} (FileNotFoundError)")

    monkeypatch.setattr(semantic, "embedding_model", broken)
    ranking = runtime.ranker.rank(task="backup web search")
    assert ranking.strategy == Strategy.LEXICAL
    assert ranking.candidates[0].tool == "search_backup"
    assert ranking.fallback == (
        "strategy semantic is not available: the wordllama package cannot be loaded"
        " (FileNotFoundError); ranked by lexical instead"
    )
    with pytest.raises(SemanticUnavailable):
        runtime.ranker.rank(task="backup web search", strategy="semantic")
