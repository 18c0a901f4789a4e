"""Which calls were made as MCP tasks, by which key, readable until when.

The call itself holds the task's state; this table only makes ``tasks/list`` a query over
one key's tasks and remembers the TTL each task was granted. A key's new task looks at
a window of the key's tasks and deletes those that can no longer be read, so what
``tasks/list`` looks through stays about its readable tasks, however many it made before.
Each window starts where the key's last one ended, from its oldest task again once it
reaches the newest: tasks that stay readable (a long TTL, an approval pending for weeks)
never hold back the stale ones behind them.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Row, Select, and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ..clock import Clock
from ..db.schema import calls, mcp_tasks
from ..db.store import Store
from ..errors import RequestError
from ..ids import is_call_id
from ..status import ACTIVE_STATES, TERMINAL_STATES

log = logging.getLogger(__name__)

# Cursors hold a creation time in ms: anything outside this is not one of ours.
_MAX_MS = 2**62
# Kept past its TTL and its call's end for a tasks/result that waited on it to read it.
FINISHED_KEPT_MS = 120_000
# A key's tasks looked at with each new task: more than one, so stale ones drain.
PRUNE_WINDOW = 100
# Oldest first, ties by id: where a window ends is exact even among tasks of one moment.
IN_ORDER = (mcp_tasks.c.created_at, mcp_tasks.c.task_id)
_TERMINAL = frozenset(str(status) for status in TERMINAL_STATES)


@dataclass(frozen=True, slots=True)
class TaskEntry:
    task_id: str
    owner: str
    created_at: int
    ttl_ms: int


class BadCursor(RequestError):
    """A ``tasks/list`` cursor this server did not hand out."""


class TaskLedger:
    """Rows of ``mcp_tasks``. A task can be read until its TTL has run out and its call
    has finished, whichever is later: a task waiting for an approval never expires."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store, self.clock = store, clock
        # Per key, the task (creation time, id) the next window starts after; kept in the
        # process only: a restart, or another process, starts from the oldest task.
        self._window_after: dict[str, tuple[int, str]] = {}

    def add(self, owner: str, task_id: str, ttl_ms: int) -> TaskEntry:
        """Record a task. A repeat of the call (same idempotency key) is the same task,
        readable for ``ttl_ms`` from now."""
        now = self.clock()
        entry = TaskEntry(task_id, owner, now, ttl_ms)
        try:
            with self.store.transaction() as conn:
                conn.execute(
                    mcp_tasks.insert(),
                    [{"task_id": task_id, "owner": owner, "created_at": now, "ttl_ms": ttl_ms}],
                )
        except IntegrityError:
            pass
        else:
            self._prune(owner)
            return entry
        with self.store.transaction() as conn:
            row = conn.execute(
                select(mcp_tasks).where(
                    and_(mcp_tasks.c.task_id == task_id, mcp_tasks.c.owner == owner)
                )
            ).first()
            if row is None:
                raise RequestError(f"task {task_id} belongs to another key")
            renewed = max(row.ttl_ms, now - row.created_at + ttl_ms)
            conn.execute(
                update(mcp_tasks).where(mcp_tasks.c.task_id == task_id).values(ttl_ms=renewed)
            )
        return TaskEntry(task_id, owner, row.created_at, renewed)

    def _prune(self, owner: str) -> None:
        """Delete those of ``owner``'s tasks in the next window that are unknown for good.
        Housekeeping: a failure is logged, and the task just made stands."""
        in_window = mcp_tasks.c.owner == owner
        if (after := self._window_after.get(owner)) is not None:
            in_window = and_(in_window, _later_than(*after))
        now = self.clock()
        try:
            with self.store.transaction() as conn:
                window = conn.execute(self._window(in_window)).all()
                stale = [row.task_id for row in window if _stale(row, now)]
                if stale:
                    conn.execute(delete(mcp_tasks).where(mcp_tasks.c.task_id.in_(stale)))
        except SQLAlchemyError as exc:
            log.warning("MCP tasks of %s not pruned: %s", owner, exc)
            return
        if len(window) < PRUNE_WINDOW:  # the window reached the newest: the next starts over
            self._window_after.pop(owner, None)
        else:
            last = window[-1]
            self._window_after[owner] = (int(last.created_at), str(last.task_id))

    @staticmethod
    def _window(in_window: ColumnElement[bool]) -> Select[tuple[str, int, int, str, int]]:
        """The ``PRUNE_WINDOW`` oldest tasks ``in_window``, by index, with their calls' state."""
        return (
            select(
                mcp_tasks.c.task_id,
                mcp_tasks.c.created_at,
                mcp_tasks.c.ttl_ms,
                calls.c.status,
                calls.c.updated_at,
            )
            .join(calls, calls.c.id == mcp_tasks.c.task_id)
            .where(in_window)
            .order_by(*IN_ORDER)
            .limit(PRUNE_WINDOW)
            # Two processes pruning one key's tasks at once take turns, never deadlock;
            # the calls' rows stay free for the workers.
            .with_for_update(skip_locked=True, of=mcp_tasks)
        )

    def owned(self, owner: str, task_id: str) -> TaskEntry | None:
        """The task, if ``owner`` made it; ``expired`` says whether its TTL has run out."""
        if not is_call_id(task_id):  # a task's id is its call's
            return None
        with self.store.reading() as conn:
            row = conn.execute(
                select(mcp_tasks).where(
                    and_(mcp_tasks.c.task_id == task_id, mcp_tasks.c.owner == owner)
                )
            ).first()
        if row is None:
            return None
        return TaskEntry(row.task_id, row.owner, row.created_at, row.ttl_ms)

    def expired(self, entry: TaskEntry) -> bool:
        return entry.created_at + entry.ttl_ms <= self.clock()

    def page(
        self, owner: str, cursor: str | None, limit: int
    ) -> tuple[list[TaskEntry], str | None]:
        """``owner``'s readable tasks, newest first, and the cursor of the next page."""
        readable = or_(
            mcp_tasks.c.created_at + mcp_tasks.c.ttl_ms > self.clock(),
            calls.c.status.in_([str(status) for status in ACTIVE_STATES]),
        )
        query = (
            select(mcp_tasks)
            .join(calls, calls.c.id == mcp_tasks.c.task_id)
            .where(and_(mcp_tasks.c.owner == owner, readable))
        )
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
        return entries, (encode_cursor(entries[-1]) if more and entries else None)


def _stale(task: Row[tuple[str, int, int, str, int]], now: int) -> bool:
    """Past its TTL, and its call finished ``FINISHED_KEPT_MS`` ago or more."""
    return (
        task.created_at + task.ttl_ms <= now
        and task.status in _TERMINAL
        and task.updated_at <= now - FINISHED_KEPT_MS
    )


def _later_than(created_at: int, task_id: str) -> ColumnElement[bool]:
    """Tasks after (``created_at``, ``task_id``) in ``IN_ORDER``."""
    # The first term alone bounds the index range; the second only filters within it.
    return and_(
        mcp_tasks.c.created_at >= created_at,
        or_(mcp_tasks.c.created_at > created_at, mcp_tasks.c.task_id > task_id),
    )


def encode_cursor(entry: TaskEntry) -> str:
    raw = f"{entry.created_at}:{entry.task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii")).decode()
        created_at, _, task_id = raw.partition(":")
        at = int(created_at)
    except (binascii.Error, UnicodeError, ValueError):
        raise BadCursor("invalid cursor") from None
    if not 0 <= at < _MAX_MS:
        raise BadCursor("invalid cursor")
    return at, task_id
