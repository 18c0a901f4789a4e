"""One index over a set of tools, answering the text strategies: ``lexical`` (BM25),
``semantic`` (embedding similarity) and ``hybrid`` (reciprocal rank fusion of the two)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from ..registry import Tool
from .candidates import Candidate
from .lexical import LexicalIndex
from .semantic import Embeddings, SemanticIndex
from .text import Analyzer

# Reciprocal rank fusion's damping constant, as in Cormack et al. (2009).
_RRF_K = 60


class ToolIndex:
    def __init__(self, tools: Sequence[Tool], embeddings: Embeddings | None = None) -> None:
        self.names = [t.name for t in tools]
        self._lexical = LexicalIndex(tools)
        self._tools = list(tools)
        self._embeddings = embeddings or Embeddings()
        self._semantic: SemanticIndex | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    def semantic_index(self) -> SemanticIndex:
        """Embedded on first use: a process that never ranks by meaning never loads the model."""
        with self._lock:
            if self._semantic is None:
                self._semantic = SemanticIndex(self._tools, self._embeddings)
            return self._semantic

    def _analyzer(self) -> Analyzer:
        analyzer = getattr(self._local, "analyzer", None)
        if analyzer is None:
            analyzer = self._local.analyzer = Analyzer()
        return analyzer

    def _mask(self, allowed: frozenset[str] | None) -> np.ndarray | None:
        if allowed is None:
            return None
        return np.fromiter((n in allowed for n in self.names), dtype=bool, count=len(self.names))

    def lexical(
        self, task: str, *, allowed: frozenset[str] | None = None, limit: int = 100
    ) -> list[Candidate]:
        terms = self._analyzer().terms(task)
        stems = [t.stem for t in terms]
        scores = self._lexical.scores(stems)
        words_of: dict[str, str] = {}
        for term in terms:
            words_of.setdefault(term.stem, term.word)
        ranked = []
        for position in _top(scores, self._mask(allowed), limit, positive_only=True):
            matched = sorted(words_of[s] for s in self._lexical.matched(position, stems))
            ranked.append(
                Candidate(self.names[position], float(scores[position]), _matches(matched))
            )
        return ranked

    def semantic(
        self, task: str, *, allowed: frozenset[str] | None = None, limit: int = 100
    ) -> list[Candidate]:
        if not task.strip():
            return []
        similarity = self.semantic_index().similarities(task)
        return [
            Candidate(self.names[p], float(similarity[p]), f"similarity {similarity[p]:.2f}")
            for p in _top(similarity, self._mask(allowed), limit, positive_only=False)
        ]

    def hybrid(
        self, task: str, *, allowed: frozenset[str] | None = None, limit: int = 100
    ) -> list[Candidate]:
        """Reciprocal rank fusion: each tool scores 1/(k + rank) in each ranking it is in."""
        depth = max(limit, 50)
        lexical = self.lexical(task, allowed=allowed, limit=depth)
        semantic = self.semantic(task, allowed=allowed, limit=depth)
        fused: dict[str, float] = {}
        reasons: dict[str, list[str]] = {}
        for ranking in (lexical, semantic):
            for rank, candidate in enumerate(ranking, start=1):
                fused[candidate.tool] = fused.get(candidate.tool, 0.0) + 1 / (_RRF_K + rank)
                reasons.setdefault(candidate.tool, []).append(candidate.reason)
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [Candidate(name, score, "; ".join(reasons[name])) for name, score in best]


def _matches(words: list[str]) -> str:
    return "matches " + ", ".join(words)


def _top(
    scores: np.ndarray, mask: np.ndarray | None, limit: int, *, positive_only: bool
) -> list[int]:
    """Positions of the ``limit`` best scores, best first, ties by position (name order)."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    keep = np.flatnonzero(scores > 0) if positive_only else np.flatnonzero(scores > -np.inf)
    if len(keep) > limit:
        keep = keep[np.argpartition(-scores[keep], limit - 1)[:limit]]
    return sorted(keep.tolist(), key=lambda p: (-scores[p], p))
