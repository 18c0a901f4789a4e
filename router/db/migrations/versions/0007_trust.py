"""Trust boundaries: the deployment's key fingerprint, sealed approvals, signed checkpoints,
server-side inbox sessions.

Revision ID: 0007
Revises: 0006

- ``deployment``: one row naming the secret key this database was set up with (its
  fingerprint, never the key) and the first audit ``seq`` chained with it; rows before it
  are chained with plain SHA-256.
- Tags (HMAC) made with that key: a request's binding when issued, each recorded
  decision, the release of an approved call, each archival checkpoint.
- ``ui_sessions``: inbox sessions as opaque ids, stored hashed.

Columns are added with plain ``ALTER TABLE … ADD COLUMN`` (never a batch copy on
SQLite), so the append-only triggers on ``audit_checkpoints`` stay in place.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployment",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("key_fingerprint", sa.String(64), nullable=False),
        sa.Column("keyed_from_seq", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("mac", sa.String(64), nullable=False),
    )
    op.add_column("approval_requests", sa.Column("binding_mac", sa.String(64), nullable=True))
    op.add_column("approval_requests", sa.Column("release_mac", sa.String(64), nullable=True))
    op.add_column("approval_decisions", sa.Column("mac", sa.String(64), nullable=True))
    op.add_column("audit_checkpoints", sa.Column("mac", sa.String(64), nullable=True))
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("key_name", sa.String(128), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Column("ended_at", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_ui_sessions_key_name", "ui_sessions", ["key_name"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_key_name", "ui_sessions")
    op.drop_table("ui_sessions")
    op.drop_column("audit_checkpoints", "mac")
    op.drop_column("approval_decisions", "mac")
    op.drop_column("approval_requests", "release_mac")
    op.drop_column("approval_requests", "binding_mac")
    op.drop_table("deployment")
