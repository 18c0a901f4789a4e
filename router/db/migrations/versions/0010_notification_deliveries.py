"""Notification deliveries: each announcement of a request's event on one channel.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("call_id", sa.String(40), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("channel", sa.String(64), nullable=False),
        sa.Column("channel_type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger, nullable=True),
        sa.Column("delivered_at", sa.BigInteger, nullable=True),
        sa.UniqueConstraint(
            "request_id", "event", "channel", name="uq_notification_deliveries_once"
        ),
    )
    op.create_index(
        "ix_notification_deliveries_status_updated",
        "notification_deliveries",
        ["status", "updated_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_notification_deliveries_status_updated", "notification_deliveries")
    op.drop_table("notification_deliveries")
