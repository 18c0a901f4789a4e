"""A request's event may be told more than once: a delivery is one per request, event,
channel and occurrence.

An approver's edit resets the approvals given before it, and each edit is told to the
request's approvers; the occurrence tells one edit from the next (the editor's decision
time), and is 0 for every event that happens once. Rows stored before take 0.

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
    # Batch mode: SQLite changes a constraint by copying the table.
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.add_column(
            sa.Column("occurrence", sa.BigInteger, nullable=False, server_default=sa.text("0"))
        )
        batch.drop_constraint(_ONCE, type_="unique")
        batch.create_unique_constraint(_ONCE, ["request_id", "event", "channel", "occurrence"])


def downgrade() -> None:
    bind = op.get_bind()
    # The later occurrences go: the constraint of one per request, event and channel holds.
    bind.execute(sa.text("DELETE FROM notification_deliveries WHERE occurrence <> 0"))
    with op.batch_alter_table("notification_deliveries") as batch:
        batch.drop_constraint(_ONCE, type_="unique")
        batch.create_unique_constraint(_ONCE, ["request_id", "event", "channel"])
        batch.drop_column("occurrence")
