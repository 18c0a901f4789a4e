"""Fallback chains: which tool answered a call, and the chain a capability call may follow.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("calls") as batch:
        batch.add_column(sa.Column("answered_by", sa.String(64), nullable=True))
        batch.add_column(sa.Column("chain", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("chain")
        batch.drop_column("answered_by")
