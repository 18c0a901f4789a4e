"""``toolrouter db``: the database schema."""

from __future__ import annotations

import click

from ..errors import Unavailable
from .common import fail, runtime


@click.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Bring the schema up to date (Alembic)."""
    from ..db.migrate import head_revision, upgrade
    from ..trust.keyring import existing_keyring

    rt = runtime(prepare=False)
    try:
        upgrade(rt.engine, existing_keyring(rt.settings, rt.namespace.name))
    except Unavailable as exc:
        fail(str(exc))
    click.echo(f"schema at {head_revision()}")
