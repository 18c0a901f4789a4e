"""Edited arguments: an approver may change a call's arguments before approving it.

The call keeps the arguments its requester sent, and both the call and its request name
the original hash and the editor; the request's binding is sealed again over the edit.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: null means the arguments are the requester's own.
    with op.batch_alter_table("calls") as batch:
        batch.add_column(sa.Column("original_args", sa.Text, nullable=True))
        batch.add_column(sa.Column("original_args_sha256", sa.String(64), nullable=True))
        batch.add_column(sa.Column("edited_by", sa.String(128), nullable=True))
    with op.batch_alter_table("approval_requests") as batch:
        batch.add_column(sa.Column("original_args_sha256", sa.String(64), nullable=True))
        batch.add_column(sa.Column("edited_by", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("edited_by")
        batch.drop_column("original_args_sha256")
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("edited_by")
        batch.drop_column("original_args_sha256")
        batch.drop_column("original_args")
