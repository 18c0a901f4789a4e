"""Running blocking work (database, Redis round trips) off the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# As many threads as anyio's default limit. A plain executor rather than
# ``anyio.to_thread.run_sync``: its capacity limiter and cancel scopes cost more CPU than
# the small queries they wrap.
MAX_THREADS = 40
_POOL = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="toolrouter-in-thread")


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Database work runs in the thread pool so one slow query does not stall the loop.

    If the caller is cancelled (its client went away), the work still runs to its end in
    its thread; only its answer is dropped.
    """
    call = functools.partial(fn, *args) if args else fn
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)
