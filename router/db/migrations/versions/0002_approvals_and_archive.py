"""The pending table, approval decisions, audit archival checkpoints.

Revision ID: 0002
Revises: 0001

The audit log's DELETE guard is replaced: a row may leave the hot table only once an
archival checkpoint covers it (the one archival path), and checkpoints are append-only.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

APPEND_ONLY = "audit log is append-only"
BAD_CHECKPOINT = "audit checkpoint does not match the log"


def upgrade() -> None:
    op.create_table(
        "approval_requests",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("call_id", sa.String(40), nullable=False, unique=True),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("args_sha256", sa.String(64), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("approvers", sa.Text, nullable=False),
        sa.Column("approvals_required", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Column("decided_at", sa.BigInteger, nullable=True),
    )
    op.create_index(
        "ix_approval_requests_status_expires", "approval_requests", ["status", "expires_at"]
    )
    op.create_table(
        "approval_decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("approver", sa.String(128), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.UniqueConstraint(
            "request_id", "approver", name="uq_approval_decisions_request_approver"
        ),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("through_seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("last_hash", sa.String(64), nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("segment", sa.Text, nullable=False),
        sa.Column("segment_sha256", sa.String(64), nullable=False),
        sa.Column("at", sa.BigInteger, nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_log_no_update ON audit_log")
        op.execute(f"""
            CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger AS $$
            BEGIN
              IF TG_OP = 'DELETE' AND OLD.seq <= COALESCE(
                   (SELECT max(through_seq) FROM audit_checkpoints), 0) THEN
                RETURN OLD;
              END IF;
              RAISE EXCEPTION '{APPEND_ONLY}';
            END;
            $$ LANGUAGE plpgsql
        """)
        op.execute("""
            CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
            FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()
        """)
        op.execute("""
            CREATE FUNCTION audit_checkpoints_append_only() RETURNS trigger AS $$
            BEGIN RAISE EXCEPTION 'audit checkpoints are append-only'; END;
            $$ LANGUAGE plpgsql
        """)
        # A checkpoint must name a real row, by its hash, past every earlier checkpoint:
        # a forged one cannot open the log to deletion without the row it claims.
        op.execute(f"""
            CREATE FUNCTION audit_checkpoints_check() RETURNS trigger AS $$
            BEGIN
              IF NEW.last_hash IS DISTINCT FROM
                   (SELECT hash FROM audit_log WHERE seq = NEW.through_seq)
                 OR NEW.through_seq <= COALESCE(
                   (SELECT max(through_seq) FROM audit_checkpoints), 0) THEN
                RAISE EXCEPTION '{BAD_CHECKPOINT}';
              END IF;
              RETURN NEW;
            END;
            $$ LANGUAGE plpgsql
        """)
        op.execute("""
            CREATE TRIGGER audit_checkpoints_valid BEFORE INSERT ON audit_checkpoints
            FOR EACH ROW EXECUTE FUNCTION audit_checkpoints_check()
        """)
        op.execute("""
            CREATE TRIGGER audit_checkpoints_no_change
            BEFORE UPDATE OR DELETE ON audit_checkpoints
            FOR EACH ROW EXECUTE FUNCTION audit_checkpoints_append_only()
        """)
    else:
        op.execute("DROP TRIGGER audit_log_no_delete")
        op.execute(f"""
            CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
            WHEN OLD.seq > COALESCE((SELECT max(through_seq) FROM audit_checkpoints), 0)
            BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY}'); END
        """)
        op.execute(f"""
            CREATE TRIGGER audit_checkpoints_valid BEFORE INSERT ON audit_checkpoints
            WHEN NEW.last_hash IS NOT (SELECT hash FROM audit_log WHERE seq = NEW.through_seq)
              OR NEW.through_seq <= COALESCE((SELECT max(through_seq) FROM audit_checkpoints), 0)
            BEGIN SELECT RAISE(ABORT, '{BAD_CHECKPOINT}'); END
        """)
        for action in ("UPDATE", "DELETE"):
            op.execute(f"""
                CREATE TRIGGER audit_checkpoints_no_{action.lower()}
                BEFORE {action} ON audit_checkpoints
                BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only'); END
            """)


def downgrade() -> None:
    op.drop_table("audit_checkpoints")
    op.drop_table("approval_decisions")
    op.drop_table("approval_requests")
