"""A call as a caller submits it, for ``Dispatcher.submit_many``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .new_call import NewCall


@dataclass(frozen=True, slots=True)
class Submission:
    """One caller's call, as ``Dispatcher.submit`` takes it (for ``submit_many``)."""

    requested_by: str
    tool: object
    args: object
    idempotency_key: str | None = None
    # The caller is told nothing until the call's outcome, which is committed durably, or
    # until it has waited for the disk (``Store.wait_for_disk``).
    waited: bool = False

    @property
    def fields(self) -> tuple[str, object, object, str | None]:
        """``Dispatcher.submit``'s arguments for this call."""
        return self.requested_by, self.tool, self.args, self.idempotency_key


def told_later(items: Sequence[Submission], together: Sequence[tuple[int, object]]) -> bool:
    """Whether nobody learns of the group's commit before a later durable one: every call
    in it is queued to run (no refusal, no request for approvers) for a waiting caller.
    Its commit then need not wait for the disk: the log is flushed in order."""
    return all(
        isinstance(slot, NewCall) and slot.message is not None and items[index].waited
        for index, slot in together
    )
