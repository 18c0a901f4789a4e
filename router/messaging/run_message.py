"""The run message: what a worker is told about a call (its id and tool, never arguments).

The core never imports a task. It publishes ``toolrouter.run_call`` with the call id and
lets whichever worker serves the queue pick it up. The message is a wake-up call; the
database row it points at is the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from ..tools.registry import Tool


class Precedence(IntEnum):
    """Which of its queue's lists a run message waits in. A worker takes every message of
    the first before any of the second, so an agent's call never waits behind a batch.
    The values are kombu's Redis priorities, of which the lowest is served first."""

    INTERACTIVE = 0
    BATCH = 9

    @classmethod
    def of(cls, batch_id: str | None, request_id: str | None = None) -> Precedence:
        """A batch's calls go after the rest, but for one an approver released (it has a
        request): somebody has just decided it, and it keeps its place when sent again."""
        return cls.BATCH if batch_id is not None and request_id is None else cls.INTERACTIVE


@dataclass(frozen=True, slots=True)
class RunMessage:
    """What a worker needs to know to run a call: only its id (and the tool, for display)."""

    call_id: str
    tool: str
    queue: str
    timeout_s: float
    # Seconds to hold the message before it runs (a retry's backoff, a rate limit's wait).
    countdown: float | None = None
    # How many calls of this tool may share one message with it (``message_builder.pack``).
    calls_per_message: int = 1
    precedence: Precedence = Precedence.INTERACTIVE


def message_for(
    tool: Tool, call_id: str, precedence: Precedence, *, countdown: float | None = None
) -> RunMessage:
    """The message that runs ``call_id`` on ``tool``'s risk queue."""
    return RunMessage(
        call_id=call_id,
        tool=tool.name,
        queue=tool.queue,
        timeout_s=tool.spec.timeout_s,
        countdown=countdown,
        calls_per_message=tool.spec.max_calls_per_message,
        precedence=precedence,
    )
