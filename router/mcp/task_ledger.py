"""Which calls were made as MCP tasks, by which key, readable until when.

The call itself holds the task's state; this table only makes ``tasks/list`` a query over
one key's tasks and remembers the TTL each task was granted.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError

from ..clock import Clock
from ..db.schema import mcp_tasks
from ..db.store import Store
from ..errors import RequestError


@dataclass(frozen=True, slots=True)
class TaskEntry:
    task_id: str
    owner: str
    created_at: int
    ttl_ms: int


class BadCursor(RequestError):
    """A ``tasks/list`` cursor this server did not hand out."""


class TaskLedger:
    """Rows of ``mcp_tasks``; a task past its TTL reads as absent."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def add(self, owner: str, task_id: str, ttl_ms: int) -> TaskEntry:
        """Record a task; a replayed call (same idempotency key) keeps its first entry."""
        entry = TaskEntry(task_id, owner, self.clock(), ttl_ms)
        try:
            with self.store.transaction() as conn:
                conn.execute(
                    mcp_tasks.insert(),
                    [
                        {
                            "task_id": task_id,
                            "owner": owner,
                            "created_at": entry.created_at,
                            "ttl_ms": ttl_ms,
                        }
                    ],
                )
        except IntegrityError:
            existing = self.owned(owner, task_id)
            if existing is not None:
                return existing
        return entry

    def owned(self, owner: str, task_id: str) -> TaskEntry | None:
        """The task, if ``owner`` made it and its TTL has not run out."""
        with self.store.reading() as conn:
            row = conn.execute(
                select(mcp_tasks).where(
                    and_(mcp_tasks.c.task_id == task_id, mcp_tasks.c.owner == owner)
                )
            ).first()
        if row is None:
            return None
        entry = TaskEntry(row.task_id, row.owner, row.created_at, row.ttl_ms)
        return entry if self._live(entry) else None

    def page(
        self, owner: str, cursor: str | None, limit: int
    ) -> tuple[list[TaskEntry], str | None]:
        """``owner``'s live tasks, newest first, and the cursor of the next page."""
        query = select(mcp_tasks).where(mcp_tasks.c.owner == owner)
        if cursor is not None:
            created_at, task_id = decode_cursor(cursor)
            query = query.where(
                or_(
                    mcp_tasks.c.created_at < created_at,
                    and_(mcp_tasks.c.created_at == created_at, mcp_tasks.c.task_id < task_id),
                )
            )
        query = query.order_by(mcp_tasks.c.created_at.desc(), mcp_tasks.c.task_id.desc())
        with self.store.reading() as conn:
            rows = conn.execute(query.limit(limit + 1)).all()
        entries = [TaskEntry(r.task_id, r.owner, r.created_at, r.ttl_ms) for r in rows]
        more = len(entries) > limit
        entries = entries[:limit]
        next_cursor = encode_cursor(entries[-1]) if more and entries else None
        return [entry for entry in entries if self._live(entry)], next_cursor

    def _live(self, entry: TaskEntry) -> bool:
        return entry.created_at + entry.ttl_ms > self.clock()


def encode_cursor(entry: TaskEntry) -> str:
    raw = f"{entry.created_at}:{entry.task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii")).decode()
        created_at, _, task_id = raw.partition(":")
        return int(created_at), task_id
    except (binascii.Error, UnicodeError, ValueError):
        raise BadCursor("invalid cursor") from None
