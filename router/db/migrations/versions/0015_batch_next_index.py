"""A batch keeps the index after its last call: a request without an ``offset`` starts there.

Such requests started at the count of calls received so far, which is not where the batch
ends once a request named its ``offset``: calls sent at offset 3 and then calls without
one were both placed at 3, and the second request's calls were rejected. The column starts
after every call a batch holds, and at its count where that is more.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

LAST_PLUS_ONE = (
    "(SELECT coalesce(max(calls.batch_index), -1) + 1 FROM calls WHERE calls.batch_id = batches.id)"
)


def upgrade() -> None:
    op.add_column(
        "batches", sa.Column("next_index", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.execute("UPDATE batches SET next_index = submitted")
    op.execute(
        f"UPDATE batches SET next_index = {LAST_PLUS_ONE} WHERE next_index < {LAST_PLUS_ONE}"
    )


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("next_index")
