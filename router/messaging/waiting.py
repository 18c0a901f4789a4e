"""Waiting for a call to finish: woken by the completion notification, re-checked each second.

Shared by the HTTP API and the MCP server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..db.rows import CallRow
from ..errors import StoreUnavailable
from ..results import CallResult
from ..status import TERMINAL_STATES
from ..threads import in_thread
from .completions import CompletionListener

# Safety net for a lost pub/sub message; not the normal way a waiter wakes.
RECHECK_S = 1.0


async def wait_for_call(
    listener: CompletionListener,
    call_id: str,
    load: Callable[[], CallRow],
    wait_s: float,
    *,
    known_unfinished: bool = False,
) -> CallResult:
    """The call once terminal, or as it stands when ``wait_s`` runs out.

    ``load`` reads the call (and checks that the caller may see it); it runs first unless
    the caller already knows the call is unfinished (it has just submitted or released
    it), and again after each wake-up that brought no result. A worker's notification
    carries the committed result, so the usual wait reads the database not at all.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    with listener.waiting_for(call_id) as waiter:
        if not known_unfinished:
            row = await in_thread(load)
            if row.status in TERMINAL_STATES:
                return row.result()
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return (await in_thread(load)).result()
            if not waiter.event.is_set():
                # ``asyncio.timeout``, not ``wait_for``: no task of its own to start and
                # finish, one loop iteration less between the notification and the answer.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, RECHECK_S)):
                        await waiter.event.wait()
            if waiter.result is not None:
                return waiter.result
            waiter.event.clear()
            try:
                row = await in_thread(load)
            except StoreUnavailable:
                continue  # not known yet: the read at the deadline answers
            if row.status in TERMINAL_STATES:
                return row.result()
