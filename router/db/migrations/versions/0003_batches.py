"""Batches: one row per batch, and each call's place in its batch.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("submitted", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("rejected", sa.BigInteger, nullable=False, server_default="0"),
        sa.UniqueConstraint("requested_by", "idempotency_key", name="uq_batches_requested_by_idem"),
    )
    op.add_column("calls", sa.Column("batch_index", sa.BigInteger, nullable=True))
    # Results are read in batch order, a page at a time.
    op.create_index("ix_calls_batch_id_index", "calls", ["batch_id", "batch_index"])


def downgrade() -> None:
    op.drop_index("ix_calls_batch_id_index", table_name="calls")
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("batch_index")
    op.drop_table("batches")
