"""The ranking before issue 26, as the baseline row: plain BM25 over each tool's name,
description, category and capabilities, no stemming, no stop words, no parameters.

The logic is ``words``, ``_document`` and ``bm25`` of ``router/tools/routing.py`` before
the change (``git show <before>:router/tools/routing.py``), unchanged but for one thing:
the documents and their statistics are computed once per catalogue instead of once per
request, which changes how long it takes, not what it ranks.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from router.tools.registry import Tool
from router.tools.selection.candidates import Candidate

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("_", " ").replace("-", " ").replace(".", " "))


def _document(tool: Tool) -> list[str]:
    spec = tool.spec
    return words(" ".join([spec.name, spec.description, spec.category, *spec.capabilities]))


class PlainBM25:
    def __init__(self, tools: Sequence[Tool], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        docs = {tool.name: _document(tool) for tool in tools}
        self._docs = [(name, Counter(doc), len(doc)) for name, doc in docs.items()]
        self._count = len(docs)
        self._average = (sum(len(d) for d in docs.values()) / len(docs) or 1.0) if docs else 1.0
        self._frequency = Counter(term for d in docs.values() for term in set(d))

    def rank(self, task: str, limit: int = 100) -> list[Candidate]:
        if not self._docs:
            return []
        k1, b, n = self.k1, self.b, self._count
        query = words(task)
        idf = {
            term: math.log(1 + (n - self._frequency[term] + 0.5) / (self._frequency[term] + 0.5))
            for term in query
        }
        ranked = []
        for name, counts, length in self._docs:
            score, matched = 0.0, []
            for term in query:
                if term not in counts:
                    continue
                tf = counts[term]
                score += (
                    idf[term] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / self._average))
                )
                matched.append(term)
            if score > 0:
                ranked.append(Candidate(name, score, "matches " + ", ".join(sorted(set(matched)))))
        return sorted(ranked, key=lambda c: (-c.score, c.tool))[:limit]
