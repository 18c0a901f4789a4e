"""Calls, the append-only audit log, API keys.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

APPEND_ONLY = "audit log is append-only"


def upgrade() -> None:
    op.create_table(
        "calls",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("risk", sa.String(8), nullable=False),
        sa.Column("args", sa.Text, nullable=False),
        sa.Column("args_sha256", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(256), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("lease_until", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
        sa.Column("published_at", sa.BigInteger, nullable=True),
        sa.Column("started_at", sa.BigInteger, nullable=True),
        sa.Column("finished_at", sa.BigInteger, nullable=True),
        sa.Column("value", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("batch_id", sa.String(40), nullable=True),
        sa.UniqueConstraint("requested_by", "idempotency_key", name="uq_calls_requested_by_idem"),
    )
    op.create_index("ix_calls_status_lease", "calls", ["status", "lease_until"])
    op.create_index("ix_calls_batch_id", "calls", ["batch_id"])
    op.create_table(
        "audit_log",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("tool", sa.String(256), nullable=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("call_id", sa.String(40), nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_log_call_id", "audit_log", ["call_id"])
    op.create_index("ix_audit_log_tool_seq", "audit_log", ["tool", "seq"])
    op.create_table(
        "api_keys",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("roles", sa.Text, nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("revoked_at", sa.BigInteger, nullable=True),
    )
    # The database, not only the code, refuses to rewrite the audit log.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"""
            CREATE FUNCTION audit_log_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION '{APPEND_ONLY}'; END;
            $$ LANGUAGE plpgsql
        """)
        op.execute("""
            CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
            FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()
        """)
        op.execute("""
            CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
            FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()
        """)
    else:
        for action in ("UPDATE", "DELETE"):
            op.execute(f"""
                CREATE TRIGGER audit_log_no_{action.lower()} BEFORE {action} ON audit_log
                BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END
            """)


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_table("audit_log")
    op.drop_table("calls")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS audit_log_append_only()")
