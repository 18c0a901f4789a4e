"""API keys and inbox sessions are sealed with the secret key.

A key's row (name, token hash, roles, revocation) and a session's (its id's hash and its
key's name) carry a tag made with the deployment's secret key, so a row written into the
database without the key, or a role or a revocation changed there, counts for nothing.

Existing keys are sealed here when the upgrade is given the deployment's key (``toolrouter
db upgrade`` and a SQLite deployment's own start are), and only if it is the key the
database was set up with; else they stay unsealed, refused until an upgrade that has it.
Existing inbox sessions end: their approvers sign in again.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from router.trust.keyring import KeyRing
from router.trust.row_seals import key_row_seal

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("seal", sa.String(64), nullable=True))
    op.add_column("ui_sessions", sa.Column("seal", sa.String(64), nullable=True))
    keyring = context.config.attributes.get("keyring")
    if keyring is not None and _is_the_deployments(keyring):
        _seal_keys(keyring)


def downgrade() -> None:
    with op.batch_alter_table("ui_sessions") as batch:
        batch.drop_column("seal")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("seal")


def _is_the_deployments(keyring: KeyRing) -> bool:
    bind = op.get_bind()
    found = bind.execute(sa.text("SELECT key_fingerprint FROM deployment")).scalar()
    return found is None or bool(found == keyring.fingerprint)


def _seal_keys(keyring: KeyRing) -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text("SELECT name, token_hash, roles, revoked_at FROM api_keys")
    ).mappings()
    for row in list(rows):
        bind.execute(
            sa.text("UPDATE api_keys SET seal = :seal WHERE name = :name"),
            {"seal": key_row_seal(keyring, dict(row)), "name": row["name"]},
        )
