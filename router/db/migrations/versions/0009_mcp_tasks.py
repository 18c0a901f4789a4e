"""MCP tasks: calls made as task-augmented ``tools/call``, listed per key.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_tasks",
        sa.Column("task_id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("ttl_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_mcp_tasks_owner_created", "mcp_tasks", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_mcp_tasks_owner_created", "mcp_tasks")
    op.drop_table("mcp_tasks")
