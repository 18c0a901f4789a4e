"""Embedding similarity between a task and each tool's text: the ``semantic`` strategy and
the other half of ``hybrid``.

The model is WordLlama's ``l2_supercat`` (256 dimensions), whose weights and tokenizer ship
inside the ``wordllama`` wheel: it loads from the package folder with downloads disabled,
once per process, and embeds on the CPU.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from ...errors import BadRequest
from ..registry import Tool
from .text import tool_text

_MODEL_LOCK = threading.Lock()
_model: Any = None
UNAVAILABLE = "strategy semantic is not available: the wordllama package cannot be loaded"


class SemanticUnavailable(BadRequest):
    """The embedding model cannot be loaded: ``semantic`` is refused, ``hybrid`` falls back."""


def embedding_model() -> Any:
    """The process's WordLlama model, loaded on first use from the installed wheel only."""
    global _model
    with _MODEL_LOCK:
        if _model is None:
            try:
                with _logging_kept():
                    import wordllama
                    from wordllama import WordLlama

                folder = Path(wordllama.__file__).parent
                _model = WordLlama.load(disable_download=True, cache_dir=folder)
                # A similarity is one small matrix-vector product: waking BLAS's other
                # threads for it costs more than it saves when the API's cores are busy.
                threadpoolctl.threadpool_limits(1, user_api="blas")
            except (ImportError, OSError, ValueError, FileNotFoundError) as exc:
                raise SemanticUnavailable(f"{UNAVAILABLE} ({type(exc).__name__})") from None
        return _model


@contextmanager
def _logging_kept() -> Iterator[None]:
    """The root logger as it was: importing wordllama calls ``logging.basicConfig`` at
    INFO, after which every library's INFO lines (httpx's, one per request) reach stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


class Embeddings:
    """Normalised embeddings by text, so a tool keeps its vector across index rebuilds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_text: dict[str, np.ndarray] = {}

    def of(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._by_text))
            if missing:
                vectors = embedding_model().embed([_text(t) for t in missing], norm=True)
                self._by_text.update(zip(missing, np.asarray(vectors, np.float32), strict=True))
            return np.stack([self._by_text[t] for t in texts]) if texts else np.zeros((0, 1))

    def query(self, text: str) -> np.ndarray:
        return np.asarray(embedding_model().embed([_text(text)], norm=True)[0], dtype=np.float32)


# Characters of a text embedded: the model pads every text of a batch to the longest, so
# one tool's megabytes of description would cost gigabytes for all of them; its meaning
# is in its first words.
EMBEDDED_CHARS = 2000


def _text(text: str) -> str:
    """A lone surrogate (valid in JSON's escapes) is not text the tokenizer takes."""
    return text[:EMBEDDED_CHARS].encode("utf-8", "replace").decode("utf-8")


class SemanticIndex:
    def __init__(self, tools: Sequence[Tool], embeddings: Embeddings) -> None:
        self.names = [t.name for t in tools]
        self._embeddings = embeddings
        self._matrix = embeddings.of([tool_text(t) for t in tools])

    def similarities(self, task: str) -> np.ndarray:
        """Cosine similarity of ``task`` with each tool, in index order (-1 to 1)."""
        if not self.names:
            return np.zeros(0, dtype=np.float32)
        return self._matrix @ self._embeddings.query(task)
