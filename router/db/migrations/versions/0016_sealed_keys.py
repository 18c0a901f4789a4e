"""API keys and inbox sessions are sealed with the secret key.

A key's row (name, token hash, roles, revocation) and a session's (its id's hash, its key's
name, its expiry) carry a tag made with the deployment's secret key, so a row written into
the database without the key, or a role or a revocation changed there, counts for nothing.

The keys there are get sealed here, so the upgrade needs the deployment's key (``toolrouter
db upgrade`` and a SQLite deployment's own start give it): without it, or with another
key, an upgrade of a database that holds keys stops and changes nothing, rather than leave
every key refused. Existing inbox sessions end: their approvers sign in again.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from alembic import context, op

from router.canonical import canonical_json
from router.errors import ConfigError
from router.trust.keyring import Purpose

if TYPE_CHECKING:
    from router.trust.keyring import KeyRing

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("seal", sa.String(64), nullable=True))
    op.add_column("ui_sessions", sa.Column("seal", sa.String(64), nullable=True))
    bind = op.get_bind()
    keys = bind.execute(sa.text("SELECT name, token_hash, roles, revoked_at FROM api_keys")).all()
    if not keys:
        return
    keyring: KeyRing | None = context.config.attributes.get("keyring")
    found = bind.execute(sa.text("SELECT key_fingerprint FROM deployment")).scalar()
    if keyring is None or (found is not None and found != keyring.fingerprint):
        raise ConfigError(
            "this upgrade seals the API keys with the deployment's secret key, and was not "
            "given it: run it where the deployment's processes run (TOOLROUTER_SECRET_KEY, "
            "or the key file in the secrets directory); nothing was changed"
        )
    for name, token_hash, roles, revoked_at in keys:
        # The seal as this revision writes it (``router.trust.row_seals``), frozen here.
        text = canonical_json(["api_key", name, token_hash, roles, revoked_at])
        bind.execute(
            sa.text("UPDATE api_keys SET seal = :seal WHERE name = :name"),
            {"seal": keyring.sign(Purpose.KEY_ROW, text), "name": name},
        )


def downgrade() -> None:
    with op.batch_alter_table("ui_sessions") as batch:
        batch.drop_column("seal")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("seal")
