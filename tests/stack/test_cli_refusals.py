"""A command that cannot do what it was asked says why in one `error:` line, exits 2, and
leaves everything as it was: no traceback, no database, key or directory made on the way."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import column, insert, table

from router.auth.keys import token_hash
from router.db.engine import make_engine
from router.db.migrate import alembic_config, current_revision
from router.runtime import Runtime
from router.settings import Settings

from ..support import services
from ..support.launcher import free_port
from .test_cli import Home, ok, python, upgraded_with_audit_rows

READ_ONLY_AUDIT = [
    ["audit", "verify"],
    ["audit", "archive"],
    ["audit", "list"],
    ["audit", "head"],
    ["audit", "export"],
]
# Commands that act on a deployment's rows: where there is none they have nothing to act on.
ON_A_DEPLOYMENT = [*READ_ONLY_AUDIT, ["keys", "list"], ["keys", "revoke", "agent"], ["stats"]]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path)


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one `error:` line of a refusal (asserted: exit 2, nothing else, no traceback)."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, f"exit {result.returncode}\n{output}"
    assert "Traceback" not in output, output
    assert result.stdout == "", output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def tree(folder: Path) -> list[str]:
    """Everything under ``folder``, so a test can show nothing was made there."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def own_secrets(home: Home, tmp_path: Path) -> Path:
    """An empty secrets directory of ``home``'s own, to show no key is made in it."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    home.env["TOOLROUTER_SECRETS_DIR"] = str(secrets)
    return secrets


# -- the database URL ---------------------------------------------------------------------------


@pytest.mark.parametrize("command_line", [["db", "upgrade"], ["up"], ["audit", "verify"]])
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("notaurl", "not a database URL"),
        ("postgresql://u:hunter2@h:port/db", "not a database URL"),
        ("mysql://u@h/db", "mysql:// is not a database toolrouter runs on"),
    ],
)
def test_a_database_url_toolrouter_cannot_use_is_refused_by_name(
    tmp_path: Path, command_line: list[str], url: str, problem: str
) -> None:
    home = Home(
        tmp_path,
        TOOLROUTER_DATABASE_URL=url,
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
    )
    secrets = own_secrets(home, tmp_path)
    line = refused(home.run(*command_line))
    assert line.startswith(f"error: TOOLROUTER_DATABASE_URL: {problem}: use sqlite:///"), line
    assert "postgresql://" in line and "postgresql+psycopg://" in line
    assert "hunter2" not in line  # the URL's password is never printed
    assert not home.state_dir.exists() and tree(secrets) == []


# Each process as an operator may start it without `toolrouter`.
PROCESSES_STARTED_DIRECTLY = [
    ["-m", "celery", "-A", "workers.app", "worker", "-Q", "tools.low"],
    ["-m", "celery", "-A", "workers.app", "beat"],
    ["-m", "uvicorn", "--factory", "router.api.app:app_from_env", "--port", "0"],
]


@pytest.mark.parametrize("argv", PROCESSES_STARTED_DIRECTLY, ids=lambda argv: argv[1])
def test_a_process_started_directly_refuses_a_bad_database_url_in_one_line(
    tmp_path: Path, argv: list[str]
) -> None:
    home = Home(tmp_path, TOOLROUTER_DATABASE_URL="mysql://u:hunter2@h/db")
    secrets = own_secrets(home, tmp_path)
    line = refused(python(*argv, env=home.env, cwd=home.cwd))
    assert line.startswith("error: TOOLROUTER_DATABASE_URL: mysql:// is not a database"), line
    assert "hunter2" not in line
    assert not home.state_dir.exists() and tree(secrets) == []


# -- commands that read a deployment where there is none ----------------------------------------


@pytest.mark.parametrize("command_line", ON_A_DEPLOYMENT)
def test_commands_on_a_deployment_refuse_a_directory_without_one_and_make_nothing(
    tmp_path: Path, command_line: list[str]
) -> None:
    """A cron job that forgot its `cd`: no TOOLROUTER_STATE_DIR, run from somewhere else."""
    home = Home(tmp_path)
    del home.env["TOOLROUTER_STATE_DIR"]
    secrets = own_secrets(home, tmp_path)
    line = refused(home.run(*command_line))
    state_dir = home.cwd.resolve() / ".toolrouter"
    assert line.startswith(f"error: no deployment in the state directory {state_dir}: "), line
    assert "TOOLROUTER_STATE_DIR" in line
    assert tree(home.cwd) == [] and tree(secrets) == []


@pytest.mark.postgres
def test_audit_verify_refuses_a_postgres_database_without_a_schema(
    tmp_path: Path, empty_pg_database: str
) -> None:
    home = Home(tmp_path, TOOLROUTER_DATABASE_URL=empty_pg_database)
    secrets = own_secrets(home, tmp_path)
    line = refused(home.run("audit", "verify"))
    assert line == (
        "error: no deployment in the database TOOLROUTER_DATABASE_URL names: its database has"
        " no schema; check TOOLROUTER_DATABASE_URL, or make the schema: run `toolrouter db"
        " upgrade`"
    )
    engine = make_engine(empty_pg_database)
    try:
        assert current_revision(engine) is None
    finally:
        engine.dispose()
    assert tree(secrets) == [] and not home.state_dir.exists()


# -- files the command cannot make --------------------------------------------------------------


def test_audit_archive_into_a_plain_file_names_it_and_moves_nothing(home: Home) -> None:
    upgraded_with_audit_rows(home, 3)
    before = ok(home.run("audit", "list"))
    in_the_way = home.state_dir / "audit-archive"
    in_the_way.write_text("not a folder\n", encoding="utf-8")
    line = refused(home.run("audit", "archive"))
    assert line == f"error: cannot archive the audit log: {in_the_way.resolve()} is not a directory"
    assert in_the_way.read_text(encoding="utf-8") == "not a folder\n"
    assert ok(home.run("audit", "list")) == before
    assert len(before.splitlines()) == 3 and json.loads(before.splitlines()[0])["at"] == 1


def test_audit_export_to_a_folder_that_does_not_exist_names_the_file(
    home: Home, tmp_path: Path
) -> None:
    ok(home.run("db", "upgrade"))
    target = tmp_path / "missing" / "audit.jsonl"
    line = refused(home.run("audit", "export", "-o", str(target)))
    assert line == f"error: cannot write the export: {target.resolve()}: No such file or directory"
    assert not target.parent.exists()


@pytest.mark.parametrize("command_line", [["keys", "list"], ["db", "upgrade"], ["up"]])
def test_a_state_dir_that_is_a_file_is_named_not_a_traceback(
    tmp_path: Path, command_line: list[str]
) -> None:
    in_the_way = tmp_path / "state-file"
    in_the_way.write_text("x", encoding="utf-8")
    home = Home(
        tmp_path, TOOLROUTER_API_PORT=str(free_port()), TOOLROUTER_FLOWER_PORT=str(free_port())
    )
    home.env["TOOLROUTER_STATE_DIR"] = str(in_the_way)
    secrets = own_secrets(home, tmp_path)
    line = refused(home.run(*command_line))
    assert line == f"error: {in_the_way.resolve()} is not a directory"
    assert in_the_way.read_text(encoding="utf-8") == "x" and tree(secrets) == []


def test_init_into_a_path_under_a_file_names_it(home: Home, tmp_path: Path) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("x", encoding="utf-8")
    line = refused(home.run("init", "--dir", str(in_the_way / "sub")))
    assert line == f"error: {(in_the_way / 'sub').resolve()}: Not a directory"
    assert in_the_way.read_text(encoding="utf-8") == "x"


# -- an upgrade that needs the deployment's key -------------------------------------------------


@pytest.fixture
def pg_database_at_0015_with_a_key(pg_template: None) -> Iterator[str]:
    """A PostgreSQL deployment of key ``"a" * 32`` at schema 0015, holding one API key."""
    name = services.fresh_pg_database()
    url = services.pg_url(name)
    try:
        runtime = Runtime(Settings(database_url=url, secret_key="a" * 32))
        try:
            _ = runtime.deployment  # the database now names the key it was set up with
        finally:
            runtime.close()
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                config = alembic_config()
                config.attributes["connection"] = conn
                command.downgrade(config, "0015")
                columns = ("name", "token_hash", "roles", "created_at", "revoked_at")
                conn.execute(
                    insert(table("api_keys", *(column(n) for n in columns))),
                    [{"name": "old", "token_hash": token_hash("t" * 43), "roles": '["agent"]'}
                     | {"created_at": 1, "revoked_at": None}],
                )  # fmt: skip
        finally:
            engine.dispose()
        yield url
    finally:
        services.drop_pg_database(name)


@pytest.mark.postgres
@pytest.mark.parametrize("key", ["none", "wrong"])
def test_db_upgrade_without_the_deployments_key_says_so_in_one_line(
    tmp_path: Path, pg_database_at_0015_with_a_key: str, key: str
) -> None:
    home = Home(tmp_path, TOOLROUTER_DATABASE_URL=pg_database_at_0015_with_a_key)
    secrets = own_secrets(home, tmp_path)
    if key == "wrong":
        home.env["TOOLROUTER_SECRET_KEY"] = "b" * 32
    line = refused(home.run("db", "upgrade"))
    assert line.startswith("error: config error: this upgrade seals the API keys"), line
    assert line.endswith("nothing was changed")
    engine = make_engine(pg_database_at_0015_with_a_key)
    try:
        assert current_revision(engine) == "0015"
    finally:
        engine.dispose()
    assert tree(secrets) == []
