"""Running blocking work (database, Redis round trips) off the event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from anyio import to_thread

T = TypeVar("T")


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """Database work runs in the thread pool so one slow query does not stall the loop."""
    return await to_thread.run_sync(fn, *args)
