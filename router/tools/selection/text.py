"""The words of tool texts and tasks as the lexical index compares them: identifiers split
(``get_weather``, ``getWeather``), lower case, English stop words left out, stemmed with
Snowball so that "averages" finds "average"."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from ..registry import Tool

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
# Letters and digits of any script; "_" separates, as in identifiers.
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(STOPWORDS_EN)
# Parameter names and descriptions from nested schemas count, to this depth.
_SCHEMA_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Term:
    word: str
    stem: str


class Analyzer:
    """Text → terms. One per index: PyStemmer's stemmer keeps a cache and is not shared
    across threads."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("english")

    def terms(self, text: str) -> list[Term]:
        words = [w for w in _WORD.findall(_CAMEL.sub(" ", text).lower()) if w not in _STOP]
        return [Term(w, s) for w, s in zip(words, self._stemmer.stemWords(words), strict=True)]

    def stems(self, text: str) -> list[str]:
        return [t.stem for t in self.terms(text)]


def tool_text(tool: Tool) -> str:
    """Everything an agent would read to choose the tool: name, description, category,
    capabilities, and its parameters' names and descriptions."""
    spec = tool.spec
    parts = [spec.name, spec.description, spec.category, *spec.capabilities]
    parts.extend(_schema_words(spec.input_schema, _SCHEMA_DEPTH))
    return "\n".join(p for p in parts if p)


def _schema_words(schema: Any, depth: int) -> Iterable[str]:
    if depth == 0 or not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            yield str(name)
            if isinstance(sub, dict) and isinstance(sub.get("description"), str):
                yield sub["description"]
            yield from _schema_words(sub, depth - 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _schema_words(items, depth - 1)
