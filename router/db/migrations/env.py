"""Alembic environment: runs against the connection handed in by ``router.db.migrate``."""

from __future__ import annotations

from alembic import context

from router.db.engine import make_engine
from router.db.schema import metadata

config = context.config


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        context.configure(
            connection=conn, target_metadata=metadata, render_as_batch=conn.dialect.name == "sqlite"
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
