"""A stdio MCP server's output read a whole line at a time, and no line past a limit.

The SDK's stdio reader appends each chunk it reads to the line so far and splits the lot
again: a line of n bytes costs time in n squared, and memory without end. The reader reads
through ``TextReceiveStream``, by that name in ``mcp.client.stdio``, and that name is given
``WholeLines`` instead: each chunk it hands on ends at a line's end, so the reader's own
buffer stays empty, and a line longer than the session's limit ends the reading
(``held_lines``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio
from anyio.streams.text import TextReceiveStream

# The longest line of the sessions started in this context, whom to tell of one cut, and
# whom to tell when the server's output ends.
_LIMIT: ContextVar[tuple[int, Callable[[], None], Callable[[], None]] | None] = ContextVar(
    "toolrouter_mcp_line_limit", default=None
)


class LineTooLong(anyio.ClosedResourceError):
    """Ends the SDK's reader quietly: it takes a closed stream for its own shutdown, and
    the session's calls are told by the limit's callback instead."""


@dataclass(eq=False)
class WholeLines(TextReceiveStream):
    """Text as ``TextReceiveStream`` decodes it, handed on up to the last line end read."""

    _held: list[str] = field(init=False, default_factory=list)
    _held_chars: int = field(init=False, default=0)
    _limit: tuple[int, Callable[[], None], Callable[[], None]] | None = field(
        init=False, default=None
    )

    def __post_init__(self, encoding: str, errors: str) -> None:
        super().__post_init__(encoding, errors)
        # Read here, in the task that starts the transport: the reader's task copies it.
        self._limit = _LIMIT.get()

    async def receive(self) -> str:
        while True:
            # At the end of the stream a part line is dropped, as the SDK drops it.
            try:
                text = await super().receive()
            except anyio.EndOfStream:
                if self._limit is not None:
                    self._limit[2]()
                raise
            end = text.rfind("\n") + 1
            line_chars = self._held_chars + (end or len(text))
            if self._limit is not None and line_chars > self._limit[0]:
                self._held, self._held_chars = [], 0
                self._limit[1]()
                raise LineTooLong(f"a line longer than {self._limit[0]} characters")
            if not end:
                self._held.append(text)
                self._held_chars = line_chars
                continue
            whole = "".join((*self._held, text[:end])) if self._held else text[:end]
            rest = text[end:]
            self._held, self._held_chars = ([rest], len(rest)) if rest else ([], 0)
            return whole


@contextmanager
def held_lines(
    max_chars: int, cut: Callable[[], None], ended: Callable[[], None]
) -> Iterator[None]:
    """Stdio sessions started inside read no line longer than ``max_chars``; ``cut`` is
    told, on the session's loop, of each line that was, and ``ended`` of the server's
    output ending (it exited)."""
    _install()
    token = _LIMIT.set((max_chars, cut, ended))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _install() -> None:
    import mcp.client.stdio

    mcp.client.stdio.TextReceiveStream = WholeLines  # type: ignore[misc]
