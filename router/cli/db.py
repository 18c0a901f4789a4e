"""``toolrouter db``: the database schema."""

from __future__ import annotations

import click

from ..errors import ConfigError, Unavailable
from .common import fail, os_problem, runtime


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
    # ConfigError: a migration that seals rows was not given the deployment's key.
    except (ConfigError, Unavailable) as exc:
        fail(str(exc))
    except OSError as exc:  # the SQLite file's directory cannot be made or written
        fail(os_problem(exc))
    click.echo(f"schema at {head_revision()}")
