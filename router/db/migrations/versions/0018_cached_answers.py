"""A call answered from its tool's cache says so: it did not run, and costs nothing.

``toolrouter_cost_total`` on ``/metrics`` already left cached answers out, while
``GET /v1/tools/{name}`` and ``toolrouter stats`` counted every finished call. Calls
finished before hold NULL and count as run.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: instant on a large table, in PostgreSQL and SQLite alike.
    op.add_column("calls", sa.Column("cached", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calls") as batch:
        batch.drop_column("cached")
