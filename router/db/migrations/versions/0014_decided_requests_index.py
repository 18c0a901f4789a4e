"""Decided approval requests are listed most recently decided first, a page at a time:
an index on ``(decided_at, id)`` reads each page from the index's end instead of
sorting every decided request for it.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_approval_requests_decided", "approval_requests", ["decided_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_approval_requests_decided", table_name="approval_requests")
