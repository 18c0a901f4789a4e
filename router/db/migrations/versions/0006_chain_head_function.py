"""PostgreSQL: ``audit_chain_head(key)`` takes the audit chain's lock and reads its head
in one round trip.

Taking the lock with ``SELECT pg_advisory_xact_lock(...)`` and then sending the head read
holds the lock, which every append in every process waits for, across one more round
trip to the client and back. One statement cannot do both (its snapshot is taken before
the lock is granted, so it could read a head that is no longer the head); a VOLATILE
PL/pgSQL function can, since each query in it takes a fresh snapshot, after the
``PERFORM`` has the lock. Nothing on SQLite: its write lock is the chain's lock.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("""
        CREATE FUNCTION audit_chain_head(chain_key bigint)
        RETURNS TABLE (head_seq bigint, head_hash varchar)
        LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock(chain_key);
            RETURN QUERY SELECT a.seq, a.hash FROM audit_log AS a ORDER BY a.seq DESC LIMIT 1;
        END;
        $$
    """)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS audit_chain_head(bigint)")
