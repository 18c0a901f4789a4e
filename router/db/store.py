"""The system of record for calls: every state change is one conditional UPDATE.

Concurrency rests on these conditions, not on locks held in Python: a claim moves a call
``queued -> running`` only if it is still queued, and a completion lands only if the
call is still ``running`` under the same claim: attempt number and claim time (the fence).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

from sqlalchemy import Engine, String, and_, bindparam, func, select, update
from sqlalchemy.engine import Connection

from ..status import CallStatus
from .direct import execute_direct, execute_direct_many, insert_rows
from .durability import commit_early, flush_earlier_commits
from .engine import translate_errors
from .kept import KeptConnections
from .rows import AttemptOutcome, CallMade, CallRow, Fence
from .schema import calls

# The hot path's statements, built once: building a Core statement and its cache key
# costs more CPU than running it.
# They run through the driver's cursor (``execute_direct``).
_GET = select(calls).where(calls.c.id == bindparam("call_id"))
_CLAIM = (
    update(calls)
    .where(
        and_(
            calls.c.id == bindparam("call_id"),
            calls.c.status == CallStatus.QUEUED,
            # Of the tool its message names, whose limits the worker applies; any, if none.
            calls.c.tool == func.coalesce(bindparam("named_tool", type_=String), calls.c.tool),
        )
    )
    .values(
        status=CallStatus.RUNNING,
        attempt=calls.c.attempt + 1,
        lease_until=bindparam("lease_until"),
        started_at=bindparam("now"),
        updated_at=bindparam("now"),
    )
    # The claimed row comes back with the update: one round trip, not two.
    .returning(*calls.c)
)
_FINISH = (
    update(calls)
    .where(
        and_(
            calls.c.id == bindparam("call_id"),
            calls.c.status == CallStatus.RUNNING,
            calls.c.attempt == bindparam("attempt"),
            calls.c.started_at.is_not_distinct_from(bindparam("claimed_at")),
        )
    )
    .values(
        status=bindparam("status"),
        value=bindparam("value"),
        content=bindparam("content"),
        error=bindparam("error"),
        error_type=bindparam("error_type"),
        answered_by=bindparam("answered_by"),
        cached=bindparam("from_cache"),
        finished_at=bindparam("now"),
        updated_at=bindparam("now"),
        lease_until=None,
    )
)


class Store:
    """Calls in the database. Every method that writes takes the caller's transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._kept = KeptConnections(engine)

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[Connection]:
        """A write transaction; ``StoreUnavailable`` when the database does not answer.
        Not ``durable``: a crash of the database may undo it (``durability``)."""
        with translate_errors(), ExitStack() as stack:
            # Around the transaction's begin only: one begun in its body is its own.
            with nullcontext() if durable else commit_early():
                conn = stack.enter_context(self._kept.connection())
                stack.enter_context(conn.begin())
            yield conn

    def close(self) -> None:
        """Close the connections kept between transactions (the engine's pool is the
        engine's to dispose of)."""
        self._kept.close()

    def wait_for_disk(self) -> None:
        """Returns once every commit made so far, durable or not, is on disk."""
        with self.transaction() as conn:
            flush_earlier_commits(conn)

    @contextmanager
    def reading(self, *, snapshot: bool = False) -> Iterator[Connection]:
        """A read-only transaction (deferred on SQLite, so it does not block writers).

        With ``snapshot``, every statement sees the database as the first one did, as a
        reader of many pages needs (a verify or export while rows are archived): SQLite's
        read transaction does so anyway, PostgreSQL's at ``REPEATABLE READ``."""
        with translate_errors(), self.engine.connect() as conn:
            conn = conn.execution_options(readonly=True)
            with conn.begin():
                if snapshot and conn.dialect.name == "postgresql":
                    conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                yield conn

    # -- reads -----------------------------------------------------------------------

    def get(self, conn: Connection, call_id: str) -> CallRow | None:
        return CallRow.from_mapping(execute_direct(conn, _GET, {"call_id": call_id}).first())

    def find_by_idempotency_key(
        self, conn: Connection, requested_by: str, key: str
    ) -> CallRow | None:
        row = conn.execute(
            select(calls).where(
                and_(calls.c.requested_by == requested_by, calls.c.idempotency_key == key)
            )
        ).first()
        return CallRow.from_row(row) if row else None

    def find_by_idempotency_keys(
        self, conn: Connection, requested_by: str, keys: Sequence[str]
    ) -> dict[str, CallRow]:
        """The calls of ``requested_by`` stored under any of ``keys``, by key."""
        found: dict[str, CallRow] = {}
        unique = sorted(set(keys))
        for start in range(0, len(unique), 500):  # keeps the IN list within every driver's limit
            rows = conn.execute(
                select(calls).where(
                    and_(
                        calls.c.requested_by == requested_by,
                        calls.c.idempotency_key.in_(unique[start : start + 500]),
                    )
                )
            )
            for row in rows:
                call = CallRow.from_row(row)
                found[str(call.idempotency_key)] = call
        return found

    def batch_calls_at(
        self, conn: Connection, batch_id: str, first: int, last: int
    ) -> dict[int, CallMade]:
        """What the batch's calls at indexes ``first`` to ``last`` are calls of, by index."""
        made = (calls.c.tool, calls.c.args_sha256, calls.c.original_args_sha256)
        rows = conn.execute(
            select(calls.c.batch_index, *made).where(
                and_(calls.c.batch_id == batch_id, calls.c.batch_index.between(first, last))
            )
        )
        return {int(index): CallMade(*call) for index, *call in rows}

    def stale_queued(
        self, conn: Connection, *, published_before: int, limit: int, tools: Collection[str]
    ) -> list[CallRow]:
        """Queued calls of ``tools`` whose last publish is older than ``published_before``,
        oldest first. Only those: calls of a tool the caller cannot publish would come
        first again on every pass, however many others wait behind them."""
        rows = conn.execute(
            select(calls)
            .where(
                and_(
                    calls.c.status == CallStatus.QUEUED,
                    (calls.c.published_at.is_(None)) | (calls.c.published_at < published_before),
                    calls.c.tool.in_(sorted(tools)),
                )
            )
            .order_by(calls.c.created_at)
            .limit(limit)
        )
        return [CallRow.from_row(row) for row in rows]

    def lost_runs(self, conn: Connection, *, now: int, limit: int) -> list[CallRow]:
        """Running calls whose lease has run out: their worker is gone."""
        rows = conn.execute(
            select(calls)
            .where(and_(calls.c.status == CallStatus.RUNNING, calls.c.lease_until < now))
            .limit(limit)
        )
        return [CallRow.from_row(row) for row in rows]

    # -- writes ----------------------------------------------------------------------

    def insert(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        insert_rows(conn, calls, rows)

    def mark_published(self, conn: Connection, call_ids: Sequence[str], *, now: int) -> None:
        conn.execute(
            update(calls)
            .where(and_(calls.c.id.in_(list(call_ids)), calls.c.status == CallStatus.QUEUED))
            .values(published_at=now)
        )

    def claim(
        self, conn: Connection, call_id: str, *, now: int, lease_ms: int, tool: str | None = None
    ) -> CallRow | None:
        """``queued -> running`` with attempt + 1; None if someone else has it, it is done,
        or it is a call of another tool than ``tool`` (when given)."""
        return self.claim_many(conn, [call_id], now=now, lease_ms=lease_ms, tool=tool)[0]

    def claim_many(
        self,
        conn: Connection,
        call_ids: Sequence[str],
        *,
        now: int,
        lease_ms: int,
        tool: str | None = None,
    ) -> list[CallRow | None]:
        """``claim`` of each of ``call_ids`` in turn, sent together."""
        lease_until = now + lease_ms
        params = [
            {"call_id": c, "lease_until": lease_until, "now": now, "named_tool": tool}
            for c in call_ids
        ]
        claimed = execute_direct_many(conn, _CLAIM, params)
        return [CallRow.from_mapping(result.first()) for result in claimed]

    def finish(self, conn: Connection, outcomes: Sequence[AttemptOutcome]) -> list[bool]:
        """Record each outcome, in turn, sent together; False where its claim no longer
        holds the call. A value and its content blocks land in one statement: both or neither."""
        params = [
            {
                "call_id": o.call_id,
                "attempt": o.fence.attempt,
                "claimed_at": o.fence.claimed_at,
                "status": o.status,
                "value": o.value,
                "content": o.content,
                "error": o.error,
                "error_type": o.error_type,
                "answered_by": o.answered_by,
                "from_cache": 1 if o.cached else None,
                "now": o.at,
            }
            for o in outcomes
        ]
        return [result.rowcount == 1 for result in execute_direct_many(conn, _FINISH, params)]

    def requeue_lost(self, conn: Connection, call_id: str, *, fence: Fence, now: int) -> bool:
        """Put a lost run of an idempotent tool back in the queue (fenced on its claim)."""
        return self._back_to_queue(conn, call_id, fence=fence, now=now, published_at=None)

    def retry_later(
        self, conn: Connection, call_id: str, *, fence: Fence, now: int, due_at: int
    ) -> bool:
        """``running -> queued`` after a retryable failure (fenced on the claim); the
        publish time is set to when it is due, so the reconciler leaves it alone until then."""
        return self._back_to_queue(
            conn,
            call_id,
            fence=fence,
            now=now,
            published_at=due_at,
            error=None,
            error_type=None,
        )

    def _back_to_queue(
        self,
        conn: Connection,
        call_id: str,
        *,
        fence: Fence,
        now: int,
        published_at: int | None,
        **values: Any,
    ) -> bool:
        """``running -> queued``, fenced on the claim that was running."""
        return self._move(
            conn,
            call_id,
            CallStatus.RUNNING,
            fence=fence,
            status=CallStatus.QUEUED,
            lease_until=None,
            published_at=published_at,
            updated_at=now,
            **values,
        )

    def renew_lease(
        self, conn: Connection, call_id: str, *, fence: Fence, lease_until: int
    ) -> bool:
        """Move the lease of the claim ``fence``, still running, to ``lease_until``."""
        return self._move(conn, call_id, CallStatus.RUNNING, fence=fence, lease_until=lease_until)

    def defer(self, conn: Connection, call_id: str, *, due_at: int) -> None:
        """A queued call held back (rate limit): tell the reconciler when it is due."""
        self._move(conn, call_id, CallStatus.QUEUED, published_at=due_at)

    def cancel(self, conn: Connection, call_id: str, *, now: int) -> bool:
        """``queued -> cancelled``; False if the call had moved on. (Pending calls are
        cancelled through the approval worker.)"""
        return self._move(
            conn,
            call_id,
            CallStatus.QUEUED,
            status=CallStatus.CANCELLED,
            finished_at=now,
            updated_at=now,
        )

    def fail_unclaimed(self, conn: Connection, call_id: str, *, now: int, error: str) -> bool:
        """Fail a call that no worker has claimed yet (its message never reached the broker)."""
        return self._move(
            conn,
            call_id,
            CallStatus.QUEUED,
            fence=Fence(0, None),  # never claimed
            status=CallStatus.FAILED,
            error=error,
            error_type="Unavailable",
            # The caller was told 503: a retry with the same key must make a new call.
            idempotency_key=None,
            finished_at=now,
            updated_at=now,
        )

    def release(self, conn: Connection, call_id: str, *, now: int) -> bool:
        """``pending -> queued`` once its request is approved."""
        return self._move(
            conn,
            call_id,
            CallStatus.PENDING,
            status=CallStatus.QUEUED,
            published_at=now,
            updated_at=now,
        )

    def edit_pending(
        self, conn: Connection, row: CallRow, args: str, digest: str, editor: str, *, now: int
    ) -> bool:
        """An approver's edit of a pending call's arguments; the first arguments are kept."""
        return self._move(
            conn,
            row.id,
            CallStatus.PENDING,
            args=args,
            args_sha256=digest,
            original_args=row.original_args or row.args,
            original_args_sha256=row.original_args_sha256 or row.args_sha256,
            edited_by=editor,
            updated_at=now,
        )

    def close_pending(
        self, conn: Connection, call_id: str, status: CallStatus, *, now: int
    ) -> bool:
        """``pending -> denied|expired|cancelled``."""
        return self._move(
            conn, call_id, CallStatus.PENDING, status=status, finished_at=now, updated_at=now
        )

    @staticmethod
    def _move(
        conn: Connection,
        call_id: str,
        from_status: CallStatus,
        *,
        fence: Fence | None = None,
        **values: Any,
    ) -> bool:
        """Set ``values`` on the call only if it is still in ``from_status`` (and, when
        given, still held by the claim ``fence``): every state change is conditional, so
        of two racing changes one wins and the other learns it lost. True if this one won."""
        where = [calls.c.id == call_id, calls.c.status == from_status]
        if fence is not None:
            where.append(calls.c.attempt == fence.attempt)
            where.append(calls.c.started_at.is_not_distinct_from(fence.claimed_at))
        result = conn.execute(update(calls).where(and_(*where)).values(**values))
        return result.rowcount == 1
