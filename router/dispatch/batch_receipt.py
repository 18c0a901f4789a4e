"""The answer to one batch submission: what became of each entry, by index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Rejection:
    index: int
    error: str


@dataclass(frozen=True, slots=True)
class Replay:
    """An entry that is a call stored before; ``call_id`` names it where it is outside the
    batch, so that the batch's results do not show it."""

    index: int
    call_id: str | None


@dataclass
class Receipt:
    """The answer to one submission: ``total`` calls received, rejected ones by index."""

    batch_id: str
    total: int
    accepted: int = 0
    replayed: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    replayed_elsewhere: list[Replay] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "batch_id": self.batch_id,
            "total": self.total,
            "accepted": self.accepted,
            "replayed": self.replayed,
            "rejected": [{"index": r.index, "error": r.error} for r in self.rejected],
            "replayed_elsewhere": [
                {"index": r.index, "call_id": r.call_id} for r in self.replayed_elsewhere
            ],
        }
