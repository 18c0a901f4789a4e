"""BM25 over each tool's text (``bm25s``), stemmed and without stop words: the ``lexical``
strategy, and one half of ``hybrid``."""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from ..registry import Tool
from .text import Analyzer, tool_text

# A tool's name is what agents and people say; counting it twice weighs it above a long
# description's passing mention.
_NAME_WEIGHT = 2


class LexicalIndex:
    """Built once per set of tools; ``scores`` is a read-only lookup, safe across threads
    once ``analyzer`` is the caller's own."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        analyzer = Analyzer()
        self.names = [t.name for t in tools]
        corpus = [
            analyzer.stems(" ".join([t.name] * (_NAME_WEIGHT - 1)) + "\n" + tool_text(t))
            for t in tools
        ]
        self._stems = [frozenset(doc) for doc in corpus]
        self._bm25 = bm25s.BM25()
        self._bm25.index([doc or [""] for doc in corpus], show_progress=False)
        self._vocabulary = frozenset(self._bm25.vocab_dict)

    def scores(self, stems: Sequence[str]) -> np.ndarray:
        """Each tool's BM25 score for these query stems (0 where nothing matches)."""
        known = [s for s in stems if s in self._vocabulary]
        if not known:
            return np.zeros(len(self.names), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(known), dtype=np.float32)

    def matched(self, position: int, stems: Sequence[str]) -> frozenset[str]:
        return self._stems[position].intersection(stems)
