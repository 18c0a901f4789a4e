"""Approval rules: the text of the rules that gated each request, sealed with its binding.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: requests issued before it have none, and their binding never covered one.
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("rule", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("rule")
