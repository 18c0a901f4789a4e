"""Why an MCP server could not be started or reached, in words: the errors inside the
SDK's task groups rather than the groups, with the tail of what the server wrote to its
stderr on that start."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# A stdio server runs under ``sh``, which writes this line to its stderr with the server's
# exit status (the SDK gives no access to it).
EXIT_MARK = "toolrouter: the server exited with code "
CLOSED = "the server exited or closed its connection"


def unreachable_reason(
    exc: BaseException, stderr_lines: Sequence[str], *, log: Path | None = None
) -> str:
    """The cause of ``exc``, the exit status ``sh`` reported, and the last lines written;
    where all of them are (``log``): a wrapper such as ``npx`` may write notices of its own
    after the server's error."""
    causes = list(dict.fromkeys(_describe(leaf) for leaf in _leaves(exc)))
    reason = "; ".join(causes) or _describe(exc)
    written = [line.strip() for line in stderr_lines if line.strip()]
    codes = [line.removeprefix(EXIT_MARK) for line in written if line.startswith(EXIT_MARK)]
    if codes:
        reason = reason.replace(CLOSED, f"the server exited with code {codes[-1]}")
    kept = [line for line in written if not line.startswith(EXIT_MARK)][-5:]
    tail = " | ".join(kept)[-600:]
    told = f"{reason}; its stderr ended: {tail}" if tail else reason
    return f"{told} (all of it in {log})" if log is not None and written else told


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"command not found: {exc.filename}"
    if type(exc).__name__ in {"ClosedResourceError", "EndOfStream", "BrokenResourceError"} or (
        "Connection closed" in str(exc)
    ):
        return f"{CLOSED} before answering"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
