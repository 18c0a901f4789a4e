"""A batch holds one call at each index: ``(batch_id, batch_index)`` becomes unique.

Two requests sending the same indexes of a keyed batch at once could both store their
calls. With the unique index the second one's insert fails, and the batch service reads
the index again and answers a replay or a conflict. Calls stored twice before this
migration are all kept: each extra one moves to an index after its batch's last, and the
batch's count of submitted calls covers them, so a later request without an ``offset``
goes after them. A downgrade leaves the moved calls where they are.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _move_extra_calls_of_an_index()
    op.drop_index("ix_calls_batch_id_index", table_name="calls")
    op.create_index("uq_calls_batch_id_index", "calls", ["batch_id", "batch_index"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_calls_batch_id_index", table_name="calls")
    op.create_index("ix_calls_batch_id_index", "calls", ["batch_id", "batch_index"])


def _move_extra_calls_of_an_index() -> None:
    """The first call stored at an index keeps it; the others go after the batch's last
    index, by creation time."""
    bind = op.get_bind()
    places = bind.execute(
        sa.text(
            "SELECT batch_id, batch_index FROM calls WHERE batch_id IS NOT NULL "
            "GROUP BY batch_id, batch_index HAVING count(*) > 1"
        )
    ).all()
    for batch_id, index in places:
        extra = (
            bind.execute(
                sa.text(
                    "SELECT id FROM calls WHERE batch_id = :batch AND batch_index = :index "
                    "ORDER BY created_at, id"
                ),
                {"batch": batch_id, "index": index},
            )
            .scalars()
            .all()[1:]
        )
        last = bind.execute(
            sa.text("SELECT max(batch_index) FROM calls WHERE batch_id = :batch"),
            {"batch": batch_id},
        ).scalar_one()
        for offset, call_id in enumerate(extra, start=1):
            bind.execute(
                sa.text("UPDATE calls SET batch_index = :index WHERE id = :id"),
                {"index": int(last) + offset, "id": call_id},
            )
        bind.execute(
            sa.text("UPDATE batches SET submitted = :end WHERE id = :batch AND submitted < :end"),
            {"end": int(last) + len(extra) + 1, "batch": batch_id},
        )
