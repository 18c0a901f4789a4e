"""The migrations build the schema ``router.db.schema`` describes: every table's indexes, by
name and uniqueness, as Alembic leaves them (migration 0005 dropped one, 0013 made one
unique; the metadata must agree)."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import column, insert, inspect, select, table
from sqlalchemy.exc import IntegrityError

from router.auth.keys import KeyStore, token_hash
from router.db.engine import make_engine
from router.db.migrate import alembic_config, current_revision, upgrade
from router.db.schema import metadata
from router.db.store import Store
from router.errors import ConfigError
from router.trust.keyring import KeyRing

# The columns of the tables as migration 0012 leaves them that these tests write.
CALL_COLUMNS = (
    "id", "tool", "risk", "args", "args_sha256", "status", "requested_by", "attempt",
    "created_at", "updated_at", "batch_id", "batch_index",
)  # fmt: skip
calls = table("calls", *(column(name) for name in CALL_COLUMNS))
KEY_COLUMNS = ("name", "token_hash", "roles", "created_at", "revoked_at")
batches = table(
    "batches",
    *(column(n) for n in ("id", "requested_by", "created_at", "updated_at", "submitted")),
)


def test_indexes_after_upgrade_are_the_schemas(database_url: str) -> None:
    engine = make_engine(database_url)  # upgraded by the migrations, on each backend
    try:
        inspector = inspect(engine)
        for table in metadata.sorted_tables:
            built = {
                (ix["name"], bool(ix["unique"]))
                for ix in inspector.get_indexes(table.name)
                if not ix.get("duplicates_constraint")  # a unique constraint's own index
            }
            declared = {(ix.name, bool(ix.unique)) for ix in table.indexes}
            assert built == declared, table.name
    finally:
        engine.dispose()


def test_calls_stored_twice_at_an_index_are_kept_at_new_indexes(database_url: str) -> None:
    """Migration 0013 makes a batch's indexes unique without losing a call stored twice."""
    engine = make_engine(database_url)
    config = alembic_config()
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0012")
            conn.execute(
                insert(batches),
                [
                    {"id": b, "requested_by": "agent", "created_at": 1, "updated_at": 1}
                    | {"submitted": n}
                    for b, n in (("batch_x", 2), ("batch_y", 1))
                ],
            )
            conn.execute(
                insert(calls),
                [
                    call_row("call_a", "batch_x", 0, at=1),
                    call_row("call_b", "batch_x", 1, at=2),
                    call_row("call_c", "batch_x", 1, at=3),
                    call_row("call_d", "batch_x", 1, at=4),
                    call_row("call_e", "batch_y", 0, at=5),
                    call_row("call_f", None, None, at=6),
                    call_row("call_g", None, None, at=7),
                ],
            )
        upgrade(engine)
        with engine.connect() as conn:
            places = dict(conn.execute(select(calls.c.id, calls.c.batch_index)).all())
            submitted = dict(conn.execute(select(batches.c.id, batches.c.submitted)).all())
        assert places == {
            "call_a": 0,
            "call_b": 1,
            "call_c": 2,
            "call_d": 3,
            "call_e": 0,
            "call_f": None,
            "call_g": None,
        }
        # A request without an offset goes after the moved calls.
        assert submitted == {"batch_x": 4, "batch_y": 1}
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(insert(calls), [call_row("call_h", "batch_y", 0, at=8)])
    finally:
        engine.dispose()


def test_a_batch_s_next_index_starts_after_its_calls_and_its_count(database_url: str) -> None:
    """Migration 0015: a request without an offset goes after every call the batch holds."""
    engine = make_engine(database_url)
    config = alembic_config()
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0014")
            conn.execute(
                insert(batches),
                [
                    {"id": b, "requested_by": "agent", "created_at": 1, "updated_at": 1}
                    | {"submitted": n}
                    for b, n in (("batch_x", 2), ("batch_y", 5), ("batch_z", 0))
                ],
            )
            conn.execute(
                insert(calls),
                [
                    call_row("call_a", "batch_x", 3, at=1),  # sent at offset 3
                    call_row("call_b", "batch_x", 4, at=2),
                    call_row("call_c", "batch_y", 0, at=3),  # and 4 rejected after it
                ],
            )
        upgrade(engine)
        with engine.connect() as conn:
            ends = dict(
                conn.execute(
                    select(column("id"), column("next_index")).select_from(table("batches"))
                ).all()
            )
        assert ends == {"batch_x": 5, "batch_y": 5, "batch_z": 0}
    finally:
        engine.dispose()


@pytest.mark.parametrize("given_the_key", [True, False])
def test_keys_of_before_the_seal_are_sealed_by_an_upgrade_given_the_key(
    database_url: str, given_the_key: bool
) -> None:
    """Migration 0016 seals the keys there are with the deployment's key; without it, it
    stops and changes nothing, rather than leave every key refused."""
    engine = make_engine(database_url)
    config = alembic_config()
    keyring = KeyRing(b"k" * 32)
    token = "t" * 43
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0015")
            conn.execute(
                insert(table("api_keys", *(column(n) for n in KEY_COLUMNS))),
                [
                    {"name": "old", "token_hash": token_hash(token), "roles": '["agent"]'}
                    | {"created_at": 1, "revoked_at": None}
                ],
            )
        if not given_the_key:
            with pytest.raises(ConfigError, match="deployment's secret key"):
                upgrade(engine)
            assert current_revision(engine) == "0015"
        upgrade(engine, keyring)
        keys = KeyStore(Store(engine), keyring)
        assert keys.authenticate(token).roles == frozenset({"agent"})
    finally:
        engine.dispose()


def call_row(call_id: str, batch_id: str | None, index: int | None, *, at: int) -> dict[str, Any]:
    return {
        "id": call_id,
        "tool": "echo",
        "risk": "low",
        "args": "{}",
        "args_sha256": "0" * 64,
        "status": "queued",
        "requested_by": "agent",
        "attempt": 0,
        "created_at": at,
        "updated_at": at,
        "batch_id": batch_id,
        "batch_index": index,
    }
