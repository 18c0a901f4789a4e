"""Waiting for a call to finish: woken by the completion notification, re-checked each second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..notify import CompletionListener
from ..status import TERMINAL_STATES
from ..store import CallRow
from .deps import blocking

# Safety net for a lost pub/sub message; not the normal way a waiter wakes.
RECHECK_S = 1.0


async def wait_for_call(
    listener: CompletionListener, call_id: str, load: Callable[[], CallRow], wait_s: float
) -> CallRow:
    """The call once terminal, or as it stands when ``wait_s`` runs out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    with listener.waiting_for(call_id) as done:
        while True:
            row = await blocking(load)
            remaining = deadline - loop.time()
            if row.status in TERMINAL_STATES or remaining <= 0:
                return row
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout=min(remaining, RECHECK_S))
            done.clear()
