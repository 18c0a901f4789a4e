"""A stdio MCP server's stderr in its log, ``mcp-<server>.log``: as text to read, and to a size.

The server writes to a pipe, not to the file: a thread copies each line, every ``${VAR}``
secret's value replaced by its name and every
character that does not print written as its escape (``shown_as_text``, as ``up`` writes
its processes' logs), so the log cannot act on a terminal that shows it. One start of a
server writes at most ``MAX_WRITTEN_BYTES``; past that the rest is read and dropped, one
line saying so. A log found past that size when a server starts is moved aside first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from ..canonical import shown_as_text
from ..files import private_file
from ..trust.redaction import Redactor

# What one start of a server writes at most: a server flooding its stderr fills no disk.
MAX_WRITTEN_BYTES = 8 * 1024 * 1024
# A longer line is written in pieces: no line is held whole.
MAX_LINE_BYTES = 64 * 1024
# How long a session's end waits for the last lines (a failed start's tail is read next).
COPIED_WITHIN_S = 5.0
DROPPED = "toolrouter: the server's stderr past {limit} bytes is not written here"


def rotated(path: Path) -> Path:
    """``path``, moved to ``<path>.1`` (replacing it) when past ``MAX_WRITTEN_BYTES``: the log
    holds at most the latest starts, and the one before it what came before them."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > MAX_WRITTEN_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    return private_file(path)


def written_since(path: Path, start: int) -> list[str]:
    """The lines of ``path`` from byte ``start`` on: what one start of its server wrote."""
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


@contextlib.asynccontextmanager
async def stderr_log(path: Path | None, redact: Redactor | None = None) -> AsyncIterator[TextIO]:
    """A file to hand a server as its stderr, copied to ``path`` (None: this process's own
    stderr, a terminal as likely as not), each line through ``redact``, until the server
    and this block have both let go of it."""
    read_fd, write_fd = os.pipe()
    name = path.name if path is not None else "stderr"
    copier = threading.Thread(
        target=_copy,
        args=(read_fd, path, redact or Redactor()),
        name=f"copy-{name}",
        daemon=True,
    )
    copier.start()
    pipe = os.fdopen(write_fd, "w")
    try:
        yield pipe
    finally:
        pipe.close()
        # The copy ends once the server has let go of the pipe too.
        await asyncio.to_thread(copier.join, COPIED_WITHIN_S)


def _pieces(pipe: BinaryIO, redact: Redactor) -> Iterator[str]:
    """The pipe's lines, a long one in pieces of about ``MAX_LINE_BYTES``, each cut where no
    secret lies across the cut, so that each piece can be redacted on its own."""
    held = ""
    for chunk in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
        text = held + chunk.decode("utf-8", "replace")
        if text.endswith("\n"):
            held = ""
            yield text[:-1]
            continue
        cut = redact.safe_cut(text)
        text, held = text[:cut], text[cut:]
        if text:
            yield text
    if held:
        yield held


def _copy(read_fd: int, path: Path | None, redact: Redactor) -> None:
    written = 0
    with open(read_fd, "rb") as pipe, _target(path) as log:
        for piece in _pieces(pipe, redact):
            if written > MAX_WRITTEN_BYTES:
                continue  # read, so that the server never blocks on a full pipe
            text = shown_as_text(redact(piece))
            data = text.encode("utf-8") + b"\n"
            written += len(data)
            if written > MAX_WRITTEN_BYTES:
                data = DROPPED.format(limit=MAX_WRITTEN_BYTES).encode() + b"\n"
            try:
                log.write(data)
                log.flush()
            except OSError:  # a full disk, a closed stderr: read on, so the server never
                written = MAX_WRITTEN_BYTES + 1  # blocks on its pipe or finds it broken


def _target(path: Path | None) -> BinaryIO:
    # Unbuffered: each line is written as it comes, and closing has nothing left to fail.
    if path is not None:
        return path.open("ab", buffering=0)
    try:
        return os.fdopen(os.dup(2), "wb", buffering=0)
    except OSError:
        # No stderr to write to: the pipe is still read, or the server would block on it.
        return open(os.devnull, "wb")
