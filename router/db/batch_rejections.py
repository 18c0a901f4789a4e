"""The indexes of a named batch refused so far, so that each counts once."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import and_, insert, select
from sqlalchemy.engine import Connection

from .schema import batch_rejections


def first_rejections(conn: Connection, batch_id: str, indexes: Collection[int]) -> int:
    """Record ``indexes`` of ``batch_id`` as refused; how many were not refused before.

    Raises ``IntegrityError`` when another request recorded one of them meanwhile."""
    if not indexes:
        return 0
    column = batch_rejections.c.batch_index
    seen = set(
        conn.execute(
            select(column).where(
                and_(
                    batch_rejections.c.batch_id == batch_id,
                    column.between(min(indexes), max(indexes)),
                )
            )
        ).scalars()
    )
    new = sorted(set(indexes) - seen)
    if new:
        rows = [{"batch_id": batch_id, "batch_index": index} for index in new]
        conn.execute(insert(batch_rejections), rows)
    return len(new)
