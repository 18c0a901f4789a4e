"""The migrations build the schema ``router.db.schema`` describes: every table's indexes, by
name, as Alembic leaves them (migration 0005 dropped one; the metadata must agree)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect

from router.db.engine import make_engine
from router.db.migrate import upgrade
from router.db.schema import metadata


def test_indexes_after_upgrade_are_the_schemas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'schema.db'}")
    try:
        upgrade(engine)
        inspector = inspect(engine)
        for table in metadata.sorted_tables:
            built = {ix["name"] for ix in inspector.get_indexes(table.name)}
            declared = {ix.name for ix in table.indexes}
            assert built == declared, table.name
    finally:
        engine.dispose()
