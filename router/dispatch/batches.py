"""Batches: thousands of calls submitted at once, each checked, stored and audited on its own.

Every call of a batch goes through the dispatcher's own checks and row-building
(``Dispatcher.check``, ``Dispatcher.new_call``), so it is refused or accepted exactly as it
would be alone: unknown tools and invalid arguments are rejected and audited, gated calls
each get their own pending request. Only the storage is bulk: one transaction per chunk
(the calls, their requests, their audit rows), and after its commit one publish of the
chunk's messages through one producer.

A batch belongs to the key that submitted it. With an idempotency key of its own, a batch
can be submitted in several requests, or again after an interruption: the same key names
the same batch, and calls whose own idempotency keys are already stored are replays.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from ..audit.log import AuditEntry
from ..auth.principal import Principal
from ..clock import Clock, wall_clock_ms
from ..db.batch_rejections import first_rejections
from ..db.rows import CallMade, CallRow
from ..db.schema import batches, calls
from ..db.store import Store
from ..errors import BrokerUnavailable, Conflict, NotFound
from ..ids import new_batch_id
from ..names import echo_name
from ..results import internal_error
from ..status import ACTIVE_STATES, CallStatus
from .batch_entries import chunks, parse_call
from .batch_receipt import Receipt, Rejection, Replay
from .checks import Checked, Refused
from .dispatcher import Dispatcher
from .keyed import REUSED, RefusedRetry, refused_retry, settle_in_batch
from .new_call import NewCall

log = logging.getLogger(__name__)

# Calls per transaction: large enough to amortize the round trips, small enough that a
# transaction holds the write lock (SQLite) or the chain lock only briefly.
CHUNK = 1000
# Unread entries' text per chunk: the chunk's values, built, take tens of MiB at most.
CHUNK_BYTES = 2 * 1024 * 1024
RESULTS_PAGE = 1000
BATCH_ID_RE = re.compile(r"^batch_[0-9a-f]{24}$")
# Concurrent submissions racing on one idempotency key: retry the chunk this many times.
CHUNK_TRIES = 3
# A request sent again, with other calls at indexes that hold calls already.
OTHER_CALL_AT = "the batch holds another call at index"
# Requests to one batch that kept storing the same calls or keys first, every try.
BATCH_BUSY = "other requests to this batch kept changing it: send this request again"


class BatchService:
    """Submits batches through the dispatcher's checks; reads their counts and results."""

    def __init__(
        self,
        store: Store,
        dispatcher: Dispatcher,
        *,
        clock: Clock = wall_clock_ms,
        chunk_size: int = CHUNK,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.store, self.dispatcher, self.clock = store, dispatcher, clock
        self.chunk_size, self.chunk_bytes = chunk_size, chunk_bytes

    # -- submission --------------------------------------------------------------------

    def submit(
        self,
        requested_by: str,
        items: Sequence[object],
        *,
        key: str | None = None,
        offset: int | None = None,
    ) -> Receipt:
        """Check, store, audit and publish ``items``. Raises ``Unavailable`` when the
        database is down, ``Conflict`` when other requests to the batch beat this one on
        every try (either way, chunks committed before stay committed: re-submit with the
        same idempotency keys to finish the batch)."""
        batch_id, start = self._open(requested_by, key, len(items), offset)
        receipt = Receipt(batch_id=batch_id, total=len(items))
        for indexes in chunks(items, self.chunk_size, self.chunk_bytes):
            self._chunk(
                requested_by, items, indexes, batch_id, start, receipt, sent_before=key is not None
            )
        return receipt

    def _open(
        self, requested_by: str, key: str | None, count: int, offset: int | None
    ) -> tuple[str, int]:
        """The batch (found by its key, else new) and the index of this submission's first call."""
        for _ in range(CHUNK_TRIES):
            now = self.clock()
            try:
                with self.store.transaction() as conn:
                    row = None
                    if key is not None:
                        # The batch's end moves and is read in one statement: two requests
                        # adding to the batch at once get places of their own.
                        row = conn.execute(
                            update(batches)
                            .where(
                                and_(
                                    batches.c.requested_by == requested_by,
                                    batches.c.idempotency_key == key,
                                )
                            )
                            .values(
                                submitted=batches.c.submitted + count,
                                next_index=_end_after(offset, count),
                                updated_at=now,
                            )
                            .returning(batches.c.id, batches.c.next_index)
                        ).first()
                    if row is None:
                        batch_id, start = new_batch_id(), offset or 0
                        conn.execute(
                            insert(batches).values(
                                id=batch_id,
                                requested_by=requested_by,
                                idempotency_key=key,
                                created_at=now,
                                updated_at=now,
                                submitted=count,
                                rejected=0,
                                next_index=start + count,
                            )
                        )
                    else:
                        batch_id = row.id
                        start = int(row.next_index) - count if offset is None else offset
                return batch_id, start
            except IntegrityError:
                continue  # another submission created the batch with this key first
        raise Conflict(BATCH_BUSY)

    def _chunk(
        self,
        requested_by: str,
        items: Sequence[object],
        indexes: range,
        batch_id: str,
        start: int,
        receipt: Receipt,
        *,
        sent_before: bool,
    ) -> None:
        # Checks first, outside any transaction: they need no database.
        slots: list[tuple[int, Checked | AuditEntry | RefusedRetry]] = []
        refused: list[Rejection] = []
        for index in indexes:
            parsed = parse_call(items[index])
            if isinstance(parsed, str):
                refused.append(Rejection(index, parsed))
                continue
            try:
                checked = self.dispatcher.check(requested_by, *parsed)
            except Exception as exc:
                # A bug in one item's checks refuses that item, not the batch around it.
                log.exception("checking item %d of batch %s failed unexpectedly", index, batch_id)
                refused.append(Rejection(index, f"unavailable: {internal_error(exc)}"))
                continue
            if isinstance(checked, Refused):
                retry = refused_retry(
                    *parsed, checked, self.dispatcher.max_nesting, in_batch_sent_again=sent_before
                )
                if retry is not None:
                    slots.append((index, retry))  # settled against the calls stored
                    continue
                refused.append(Rejection(index, str(checked.result.error)))
                if checked.audit is not None:
                    slots.append((index, checked.audit))
                continue
            slots.append((index, checked))
        for attempt in range(CHUNK_TRIES):
            try:
                new, replays, rejected = self._store_chunk(
                    requested_by, slots, batch_id, start, refused, sent_before=sent_before
                )
                break
            except IntegrityError:
                # A call with one of these idempotency keys, or a call or refusal at one of
                # these indexes, was stored meanwhile: look again. Chunks stored before stay
                # stored, and the request sent again replays them.
                if attempt == CHUNK_TRIES - 1:
                    raise Conflict(BATCH_BUSY) from None
        receipt.accepted += len(new)
        receipt.replayed += len(replays)
        receipt.replayed_elsewhere.extend(r for r in replays if r.call_id is not None)
        receipt.rejected.extend(sorted(refused + rejected, key=lambda r: r.index))
        self.dispatcher.announce_pending(new)
        # Enqueue after commit, all of the chunk's messages through one producer.
        messages = [item.message for item in new if item.message is not None]
        try:
            self.dispatcher.publisher.publish(messages)
        except BrokerUnavailable as exc:
            # Stored and queued: the reconciler publishes them again once Redis is back.
            log.warning(
                "batch %s: %d calls stored but not published: %s", batch_id, len(messages), exc
            )

    def _store_chunk(
        self,
        requested_by: str,
        slots: list[tuple[int, Checked | AuditEntry | RefusedRetry]],
        batch_id: str,
        start: int,
        refused: list[Rejection],
        *,
        sent_before: bool,
    ) -> tuple[list[NewCall], list[Replay], list[Rejection]]:
        """``sent_before``: the batch has a key, so these indexes may hold calls already
        (the request is sent again): a call there is a replay of the same one, a conflict
        for another, as for a call's own key. Returns the new calls, the replays and the
        rejections settled here (rejected, and refused calls that are no retry)."""
        now = self.clock()
        new: list[NewCall] = []
        entries: list[AuditEntry] = []
        rejected: list[Rejection] = []
        replays: list[Replay] = []
        with self.store.transaction() as conn:
            keys = [s.idempotency_key for _, s in slots if not isinstance(s, AuditEntry)]
            existing = self.store.find_by_idempotency_keys(
                conn, requested_by, [k for k in keys if k is not None]
            )
            fresh: dict[str, Checked] = {}  # keys first used within this chunk
            placed: dict[int, CallMade] = {}
            if sent_before and slots:
                first, last = start + slots[0][0], start + slots[-1][0]
                placed = self.store.batch_calls_at(conn, batch_id, first, last)
            for index, slot in slots:
                if isinstance(slot, AuditEntry):
                    entries.append(slot)
                    continue
                if isinstance(slot, RefusedRetry):
                    there = placed.get(start + index)
                    key = slot.idempotency_key
                    stored = existing.get(key) if key is not None else None
                    if there is None and stored is None:  # no retry: refused as a new call
                        rejected.append(Rejection(index, str(slot.refused.result.error)))
                        entries.extend([slot.refused.audit] if slot.refused.audit else [])
                    elif slot.retries(there, stored):
                        replays.append(Replay(index, _outside(stored, batch_id, there)))
                    else:
                        other = REUSED if there is None else f"{OTHER_CALL_AT} {start + index}"
                        rejected.append(Rejection(index, other))
                    continue
                there = placed.get(start + index)
                if there is not None:
                    if there.is_call(slot.tool.name, slot.digest):
                        replays.append(Replay(index, None))
                    else:
                        rejected.append(Rejection(index, f"{OTHER_CALL_AT} {start + index}"))
                    continue
                key = slot.idempotency_key
                if key is not None and (key in existing or key in fresh):
                    stored = existing.get(key)
                    answer = settle_in_batch(stored, fresh.get(key), slot)
                    if answer is None:
                        replays.append(Replay(index, _outside(stored, batch_id, None)))
                    else:
                        rejected.append(Rejection(index, answer))
                    continue
                if key is not None:
                    fresh[key] = slot
                item = self.dispatcher.new_call(
                    requested_by, slot, now=now, batch_id=batch_id, batch_index=start + index
                )
                new.append(item)
                entries.append(item.audit)
            refused_at = [start + r.index for r in refused + rejected]
            # Sent again, a request is refused again: each index counts once.
            count = first_rejections(conn, batch_id, refused_at) if sent_before else len(refused_at)
            if count:
                conn.execute(
                    update(batches)
                    .where(batches.c.id == batch_id)
                    .values(rejected=batches.c.rejected + count)
                )
            # Last: its audit append takes the chain's lock (see ``audit.append``).
            self.dispatcher.store_new(conn, new, entries, at=now)
        return new, replays, rejected

    # -- reading -----------------------------------------------------------------------

    def _load(self, who: Principal, batch_id: str) -> Any:
        if not BATCH_ID_RE.fullmatch(batch_id):
            raise NotFound(f"unknown batch: {echo_name(batch_id)}")
        with self.store.reading() as conn:
            row = conn.execute(select(batches).where(batches.c.id == batch_id)).first()
        # Another key's batch is as unknown as a batch that never was: no existence leak.
        if row is None or not (row.requested_by == who.name or who.is_operator):
            raise NotFound(f"unknown batch: {batch_id}")
        return row

    def status(self, who: Principal, batch_id: str) -> dict[str, Any]:
        """Counts by status of the batch's calls, and whether all of them have finished."""
        batch = self._load(who, batch_id)
        with self.store.reading() as conn:
            rows = conn.execute(
                select(calls.c.status, func.count())
                .where(calls.c.batch_id == batch_id)
                .group_by(calls.c.status)
            ).all()
        counts = {str(status): 0 for status in CallStatus}
        counts.update({str(status): int(n) for status, n in rows})
        total = sum(counts.values())
        active = sum(counts[str(status)] for status in ACTIVE_STATES)
        return {
            "ok": True,
            "batch_id": batch_id,
            "requested_by": batch.requested_by,
            "created_at": batch.created_at,
            "total": total,
            "counts": counts,
            "submitted": batch.submitted,
            "rejected": batch.rejected,
            "done": active == 0,
        }

    def results(self, who: Principal, batch_id: str) -> Iterator[bytes]:
        """The batch's call results as NDJSON lines, in batch order, a page at a time.

        Ownership is checked now, before the first line; each page is its own short read.
        """
        self._load(who, batch_id)
        return self._lines(batch_id)

    def _lines(self, batch_id: str) -> Iterator[bytes]:
        after: tuple[int, str] | None = None
        while True:
            stmt = select(calls).where(calls.c.batch_id == batch_id)
            if after is not None:
                stmt = stmt.where(
                    or_(
                        calls.c.batch_index > after[0],
                        and_(calls.c.batch_index == after[0], calls.c.id > after[1]),
                    )
                )
            stmt = stmt.order_by(calls.c.batch_index, calls.c.id).limit(RESULTS_PAGE)
            with self.store.reading() as conn:
                page = [CallRow.from_row(row) for row in conn.execute(stmt)]
            for row in page:
                line = {**row.result().to_dict(), "index": row.batch_index}
                yield _ndjson(line)
            if len(page) < RESULTS_PAGE:
                return
            after = (int(page[-1].batch_index or 0), page[-1].id)


def _outside(stored: CallRow | None, batch_id: str, at_index: CallMade | None) -> str | None:
    """The id of the call an entry replays where the batch's results do not show it: a call
    stored under its key outside the batch."""
    if at_index is not None or stored is None or stored.batch_id == batch_id:
        return None
    return stored.id


def _end_after(offset: int | None, count: int) -> ColumnElement[int]:
    """The batch's next index once a request of ``count`` calls is placed: after the batch's
    end without an ``offset``; else after the request's calls, if that is further."""
    if offset is None:
        return batches.c.next_index + count
    return case((batches.c.next_index < offset + count, offset + count), else_=batches.c.next_index)


def _ndjson(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
