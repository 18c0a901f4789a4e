"""A local stand-in for an OpenAI-compatible chat completions API, for the ``llm`` routing
strategy: ``POST /v1/chat/completions`` on loopback, every request recorded, each answered
as the test's ``reply`` says.

By default the "model" is deterministic: of the tools listed in the prompt it picks those
whose name and description share the most words with the task. Other replies script what a
real endpoint does now and then: an HTTP error, an answer too late, a body that is not JSON,
prose, names of tools nobody listed, JSON in a code fence, an answer trickled out slowly.

It runs on ``ScriptedServer`` (its own event loop in a thread), so a test sets ``reply`` and
reads ``seen`` from its own thread while the API under test talks to it from another process.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from .scripted_http import ScriptedServer, Seen

PATH = "/v1/chat/completions"
# Words too common to say anything about which tool fits.
_STOP_WORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "into", "is", "it"}
    | {"its", "of", "on", "or", "that", "the", "this", "to", "with"}
)


@dataclass(frozen=True)
class Reply:
    """How the server answers. ``content`` is the assistant message's text (None: the word
    model's pick); ``body`` replaces the whole response body; ``delay_s`` comes before the
    answer; ``trickle_s`` sends the body a byte at a time with that pause between bytes."""

    status: int = 200
    content: str | None = None
    body: bytes | None = None
    delay_s: float = 0.0
    trickle_s: float = 0.0
    picks: int = 3


MODEL = Reply()


def says(content: str) -> Reply:
    """A well-formed chat completion whose message is ``content``."""
    return Reply(content=content)


def names(*tools: str, fenced: bool = False) -> Reply:
    """A chat completion naming ``tools``, as ``{"tools": [...]}`` (in a code fence if asked)."""
    text = json.dumps({"tools": list(tools)})
    return says(f"Here is my choice:\n```json\n{text}\n```\n" if fenced else text)


def fails(status: int) -> Reply:
    """An HTTP error with an OpenAI-style error body."""
    kind = "invalid_api_key" if status == 401 else "server_error"
    error = {"message": f"scripted failure {status}", "type": kind, "code": kind}
    return Reply(status=status, body=json.dumps({"error": error}).encode())


def slow(seconds: float) -> Reply:
    """The word model's answer, ``seconds`` late."""
    return Reply(delay_s=seconds)


def raw(body: bytes) -> Reply:
    """HTTP 200 with ``body`` as it is."""
    return Reply(body=body)


@dataclass(frozen=True)
class Prompt:
    """The task and the listed ``(name, description)`` tools of a request's user message,
    as ``router.tools.selection.llm`` writes it: ``Task: ...`` then ``Tools:`` and one
    ``- name: description`` line per tool."""

    system: str
    task: str
    tools: list[tuple[str, str]]

    @property
    def tool_names(self) -> list[str]:
        return [name for name, _ in self.tools]


def prompt_of(body: dict[str, Any]) -> Prompt:
    messages = body["messages"]
    system = next(m["content"] for m in messages if m["role"] == "system")
    user = next(m["content"] for m in messages if m["role"] == "user")
    head, _, listing = user.partition("\n\nTools:\n")
    task = head.removeprefix("Task: ")
    tools: list[tuple[str, str]] = []
    for line in listing.split("\n"):
        if line.startswith("- ") and ": " in line:
            name, _, description = line[2:].partition(": ")
            tools.append((name, description))
        elif tools:  # a description running over more than one line
            name, description = tools[-1]
            tools[-1] = (name, f"{description}\n{line}")
    return Prompt(system, task, tools)


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - _STOP_WORDS


def pick(prompt: Prompt, most: int = 3) -> list[str]:
    """The word model: listed tools sharing at least one word with the task, most shared
    words first, ties in listing order; at most ``most``."""
    task = words(prompt.task)
    scored = [
        (len(task & words(f"{name} {description}")), i, name)
        for i, (name, description) in enumerate(prompt.tools)
    ]
    return [name for shared, _, name in sorted(scored, key=lambda s: (-s[0], s[1])) if shared][
        :most
    ]


def completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}"
    return f"{head}\r\n\r\n".encode() + body


class ChatServer:
    """``with ChatServer() as chat``: ``chat.url`` is the base URL to configure (``.../v1``),
    ``chat.reply`` what the next requests get, ``chat.requests`` what came in."""

    def __init__(self) -> None:
        self.reply = MODEL
        self.answered: list[list[str]] = []  # the word model's picks, request by request
        self._server = ScriptedServer(self._answer)

    def __enter__(self) -> ChatServer:
        self._server.__enter__()
        self.url = f"{self._server.url}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    @property
    def requests(self) -> list[Seen]:
        return list(self._server.seen)

    def prompts(self) -> list[Prompt]:
        return [prompt_of(seen.json()) for seen in self.requests]

    def reset(self, reply: Reply = MODEL) -> None:
        """Forget what came in, and answer with ``reply`` from now on."""
        self._server.seen.clear()
        self.answered.clear()
        self.reply = reply

    async def _answer(self, seen: Seen, writer: asyncio.StreamWriter) -> bool:
        reply = self.reply
        if (seen.method, seen.target) != ("POST", PATH):
            writer.write(_response(404, b'{"error": {"message": "no such route"}}'))
            return True
        # Made (and recorded) on arrival, so an answer held back never lands in a later test.
        if reply.body is not None:
            data = reply.body
        else:
            request = seen.json()
            content = reply.content
            if content is None:
                chosen = pick(prompt_of(request), reply.picks)
                self.answered.append(chosen)
                content = json.dumps({"tools": chosen})
            data = json.dumps(completion(str(request.get("model")), content)).encode()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        whole = _response(reply.status, data)
        if not reply.trickle_s:
            writer.write(whole)
            return True
        head, body = whole.split(b"\r\n\r\n", 1)
        writer.write(head + b"\r\n\r\n")
        for i in range(len(body)):
            await writer.drain()
            await asyncio.sleep(reply.trickle_s)
            writer.write(body[i : i + 1])
        return True
