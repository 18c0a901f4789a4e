"""Drop ``ix_calls_batch_id``: ``ix_calls_batch_id_index`` (batch_id, batch_index) serves
every lookup by batch id, and each index is one more B-tree insert per accepted call.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_calls_batch_id", table_name="calls")


def downgrade() -> None:
    op.create_index("ix_calls_batch_id", "calls", ["batch_id"])
