"""A named batch counts each refused index once, however often its request is sent again.

``batches.rejected`` grew by every refusal of every request: a file of three bad lines run
three times read nine. The indexes refused are kept so that a request sent again finds
them. Batches refused before keep their counts.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batch_rejections",
        sa.Column("batch_id", sa.String(40), primary_key=True),
        sa.Column("batch_index", sa.BigInteger, primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("batch_rejections")
