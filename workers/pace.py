"""How long each tool's calls take in this pool process: what a shared message claims ahead.

A shared message's calls of an idempotent tool are claimed in runs, and their outcomes
committed together, one transaction for the run (``workers.execution.shared_message``).
A run is as many calls as this process has lately finished within the outcome hold, so a
caller's answer waits for the calls after its own by about that hold at most, and a
claimed call starts well inside its lease. A tool this process has not run yet gets runs
of one: each call claimed with the outcome of the one before, as with a tool whose
outcomes are not held.
"""

from __future__ import annotations

# Weight of the newest call in the running mean: a tool that slows down is seen within a
# few calls, one odd call does not swing the run length.
_NEWEST_WEIGHT = 0.2


class Pace:
    """A running mean of the wall time per call, by tool, in milliseconds."""

    def __init__(self) -> None:
        self._ms: dict[str, float] = {}

    def observe(self, tool: str, ms: float) -> None:
        last = self._ms.get(tool)
        self._ms[tool] = ms if last is None else last + _NEWEST_WEIGHT * (ms - last)

    def ms(self, tool: str) -> float | None:
        return self._ms.get(tool)

    def calls_within(self, tool: str, hold_ms: float, most: int) -> int:
        """How many of ``tool``'s calls, one after another, take ``hold_ms`` or less
        (at least 1, at most ``most``; 1 while the tool's pace is unknown)."""
        ms = self._ms.get(tool)
        if ms is None or hold_ms <= 0:
            return 1
        return max(1, min(most, int(hold_ms / max(ms, 1e-3))))

    def forget(self) -> None:
        self._ms.clear()


# One per process: an executor is made per message, the pace outlives it.
pace = Pace()
