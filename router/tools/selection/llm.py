"""The ``llm`` strategy: an OpenAI-compatible chat model picks among the default ranking's
shortlist. Off unless an endpoint is configured; any failure is a ``LlmFailed`` with a
reason, and the caller ranks by the default strategy instead."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from ..registry import Tool
from .candidates import Candidate

_SYSTEM = (
    "You choose the tools that best fit a task. Reply with JSON only, of the form "
    '{"tools": ["name", ...]}: names from the list given, best first, at most five.'
)
_DESCRIPTION_CHARS = 300
_ANSWER_BYTES = 64 * 1024
_OBJECTS_TRIED = 16


class LlmFailed(Exception):
    """Why the model gave no usable ranking, as a sentence without secrets."""


@dataclass(frozen=True, slots=True)
class LlmEndpoint:
    url: str
    key: str = field(repr=False)
    model: str = "gpt-4o-mini"
    timeout_s: float = 10.0
    # Routes asking the model at once; more fall back at once rather than hold threads
    # every other request needs.
    concurrency: int = 4


class LlmSelector:
    def __init__(self, endpoint: LlmEndpoint) -> None:
        self.endpoint = endpoint
        self._slots = threading.BoundedSemaphore(endpoint.concurrency)
        headers = {"Authorization": f"Bearer {endpoint.key}"} if endpoint.key else {}
        self._client = httpx.Client(
            base_url=endpoint.url.rstrip("/"),
            headers=headers,
            timeout=endpoint.timeout_s,
            follow_redirects=False,
        )

    def rerank(self, task: str, shortlist: Sequence[Tool]) -> list[Candidate]:
        """The shortlist reordered by the model: its choices first, then the rest in the
        shortlist's order. ``LlmFailed`` when the answer is missing, late or unusable."""
        if not shortlist:
            return []
        if not self._slots.acquire(blocking=False):
            raise LlmFailed(f"the model is already asked by {self.endpoint.concurrency} routes")
        try:
            chosen = self._choose(task, shortlist)
        finally:
            self._slots.release()
        listed = [t.name for t in shortlist]
        ranked = [
            Candidate(name, 1.0 / rank, f"chosen by the model, {rank} of {len(chosen)}")
            for rank, name in enumerate(chosen, start=1)
        ]
        ranked.extend(
            Candidate(name, 0.0, "in the shortlist, not chosen by the model")
            for name in listed
            if name not in chosen
        )
        return ranked

    def _choose(self, task: str, shortlist: Sequence[Tool]) -> list[str]:
        # One line per tool: a description's own line breaks cannot forge another entry.
        listing = "\n".join(
            f"- {t.name}: {' '.join(t.spec.description.split())[:_DESCRIPTION_CHARS]}"
            for t in shortlist
        )
        body = {
            "model": self.endpoint.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": _SYSTEM},
                {"role": "user", "content": f"Task: {task}\n\nTools:\n{listing}"},
            ],
        }
        names = _names_in(self._post(body))
        listed = {t.name for t in shortlist}
        chosen = list(dict.fromkeys(n for n in names if n in listed))
        if not chosen:
            raise LlmFailed("the model named none of the listed tools")
        return chosen

    def _post(self, body: dict[str, object]) -> bytes:
        """The answer's body, read against one deadline for the whole exchange: httpx's
        timeout bounds each read, and a server trickling bytes would pass every one."""
        timeout_s = self.endpoint.timeout_s
        deadline = time.monotonic() + timeout_s
        late = LlmFailed(f"the model did not answer within {timeout_s:g} s")
        received = bytearray()
        try:
            with self._client.stream("POST", "/chat/completions", json=body) as response:
                if response.status_code != 200:
                    raise LlmFailed(f"the model endpoint answered HTTP {response.status_code}")
                for chunk in response.iter_bytes():
                    received += chunk
                    if time.monotonic() > deadline:
                        raise late
                    if len(received) > _ANSWER_BYTES:
                        raise LlmFailed("the model's answer is longer than 64 KiB")
        except httpx.TimeoutException:
            raise late from None
        except (httpx.HTTPError, UnicodeError) as exc:
            reason = f"the model endpoint cannot be reached ({type(exc).__name__})"
            raise LlmFailed(reason) from None
        return bytes(received)

    def close(self) -> None:
        self._client.close()


def _names_in(raw: bytes) -> list[str]:
    """The tool names of a chat completion whose message holds ``{"tools": [...]}``,
    possibly among prose, reasoning or a code fence with braces of their own."""
    unusable = LlmFailed("the model's answer is not a chat completion with a tool list")
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        raise unusable from None
    if not isinstance(content, str):
        raise unusable
    decoder = json.JSONDecoder()
    # A few objects at most: a hostile answer of many nested braces costs nothing more.
    for brace in itertools.islice(re.finditer(r"\{", content), _OBJECTS_TRIED):
        try:
            found, _ = decoder.raw_decode(content, brace.start())
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict) and isinstance(found.get("tools"), list):
            return [n for n in found["tools"] if isinstance(n, str)]
    raise unusable
