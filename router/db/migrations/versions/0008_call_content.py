"""MCP content: the content blocks of a call's result, beside its value.

Revision ID: 0008
Revises: 0007

A plain ``ALTER TABLE … ADD COLUMN`` of a nullable column: no copy of the calls table on
SQLite, no rewrite on PostgreSQL, and every stored call keeps its answer unchanged.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("calls", sa.Column("content", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("calls", "content")
