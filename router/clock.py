"""Time is passed in: components take a ``Clock`` and never read the wall clock in a branch."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""A function returning milliseconds since the epoch."""


def wall_clock_ms() -> int:
    """The real clock, in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told to; for tests that assert exact timestamps."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now
