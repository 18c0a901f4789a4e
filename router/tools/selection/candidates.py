"""What a ranking gives: candidates with a score and a reason, and the strategy that made
them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Strategy(StrEnum):
    LEXICAL = "lexical"
    SEMANTIC = "semantic"
    HYBRID = "hybrid"
    LLM = "llm"
    CAPABILITY = "capability"
    COST = "cost"
    RULES = "rules"


# Strategies that rank by the task's text (``llm`` by a capability alone, too).
TEXT_STRATEGIES = frozenset(
    {Strategy.LEXICAL, Strategy.SEMANTIC, Strategy.HYBRID, Strategy.LLM, Strategy.RULES}
)


@dataclass(frozen=True, slots=True)
class Candidate:
    tool: str
    score: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "score": round(self.score, 4), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Ranking:
    """Candidates best first; ``fallback`` says why the asked-for strategy was not used."""

    strategy: Strategy
    candidates: list[Candidate]
    fallback: str | None = None

    def answer(self, limit: int) -> dict[str, Any]:
        """``POST /v1/route``'s answer (and ``toolrouter route --json``'s)."""
        answer: dict[str, Any] = {
            "ok": True,
            "strategy": self.strategy.value,
            "candidates": [c.to_dict() for c in self.candidates[:limit]],
        }
        if self.fallback is not None:
            answer["fallback"] = self.fallback
        return answer
