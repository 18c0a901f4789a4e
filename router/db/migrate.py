"""Schema upgrades through Alembic, and the check that refuses an old schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from ..errors import SchemaOutdated
from .engine import translate_errors

if TYPE_CHECKING:
    from ..trust.keyring import KeyRing


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", "router.db:migrations")
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with translate_errors(), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, keyring: KeyRing | None = None) -> None:
    """Bring the schema to head (``toolrouter db upgrade``). With the deployment's
    ``keyring``, migrations that seal rows seal those already there."""
    config = alembic_config()
    with translate_errors(), engine.begin() as conn:
        config.attributes["connection"] = conn
        config.attributes["keyring"] = keyring
        command.upgrade(config, "head")


def ensure_schema(engine: Engine, keyring: KeyRing | None = None) -> None:
    """SQLite upgrades itself; any other database must already be at head."""
    if engine.dialect.name == "sqlite":
        upgrade(engine, keyring)
        return
    current, head = current_revision(engine), head_revision()
    if current != head:
        raise SchemaOutdated(
            f"database schema is at {current or 'nothing'}, code needs {head}: "
            "run `toolrouter db upgrade`"
        )
