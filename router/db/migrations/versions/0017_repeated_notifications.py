"""A request's event may be told more than once: a delivery is one per request, event,
channel and occurrence.

An approver's edit resets the approvals given before it, and each edit is told to the
request's approvers: a request counts its edits, and an ``edited`` delivery's occurrence
is the edit it tells (0 for every event that happens once). Rows stored before take 0,
and a request edited before counts as edited once.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_ONCE = "uq_notification_deliveries_once"


def upgrade() -> None:
    op.add_column(
        "approval_requests",
        sa.Column("edits", sa.Integer, nullable=False, server_default=sa.text("0")),
    )
    op.get_bind().execute(
        sa.text("UPDATE approval_requests SET edits = 1 WHERE edited_by IS NOT NULL")
    )
    # Batch mode: SQLite changes a constraint by copying the table.
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.add_column(
            sa.Column("occurrence", sa.BigInteger, nullable=False, server_default=sa.text("0"))
        )
        batch.drop_constraint(_ONCE, type_="unique")
        batch.create_unique_constraint(_ONCE, ["request_id", "event", "channel", "occurrence"])


def downgrade() -> None:
    bind = op.get_bind()
    # Code before knows no `edited` event, and the constraint of one per request, event and
    # channel then holds.
    bind.execute(sa.text("DELETE FROM notification_deliveries WHERE event = 'edited'"))
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.drop_constraint(_ONCE, type_="unique")
        batch.create_unique_constraint(_ONCE, ["request_id", "event", "channel"])
        batch.drop_column("occurrence")
    with op.batch_alter_table("approval_requests") as batch:
        batch.drop_column("edits")
