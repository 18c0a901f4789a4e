"""The command line and the deployment's secret key, run as a subprocess on a real SQLite
database:

- `db upgrade` of a deployment that has no key makes none (an upgrade run away from the
  deployment must not invent a key its processes then disagree with);
- `keys list` shows a key row forged in the database as refused, and a real one as active.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from router.audit.log import AuditEntry
from router.db.migrate import head_revision
from router.messaging.namespace import Namespace
from router.runtime import Runtime
from router.settings import Settings
from router.trust.keyring import key_file

from .test_cli import Home, ok
from .test_trust_key_rows import sha256, write

REFUSED = "refused: not sealed with this deployment's key"


def test_db_upgrade_makes_no_key_file_where_the_deployment_has_none(tmp_path: Path) -> None:
    # A secrets folder of this test alone: whatever appears in it, the upgrade made.
    secrets_dir = tmp_path / "secrets"
    fresh = Home(tmp_path, TOOLROUTER_SECRETS_DIR=str(secrets_dir))
    assert "TOOLROUTER_SECRET_KEY" not in fresh.env
    assert str(head_revision()) in ok(fresh.run("db", "upgrade"))
    assert (fresh.state_dir / "toolrouter.db").exists()  # the upgrade did run, on SQLite
    settings = Settings(state_dir=fresh.state_dir, secrets_dir=secrets_dir)
    assert not key_file(settings, Namespace.of(settings).name).exists()
    assert not secrets_dir.exists() or not any(secrets_dir.rglob("*"))


def test_keys_list_shows_a_key_forged_in_the_database_as_refused(tmp_path: Path) -> None:
    home = Home(tmp_path)
    ok(home.run("keys", "create", "--name", "real", "--role", "agent"))
    runtime = Runtime(home.settings())
    try:
        # The real row's roles, time and seal under another name and token: no key.
        write(
            runtime,
            "INSERT INTO api_keys (name, token_hash, roles, created_at, seal) "
            "SELECT 'forged', :hash, roles, created_at, seal FROM api_keys WHERE name = 'real'",
            hash=sha256(secrets.token_urlsafe(32)),
        )
    finally:
        runtime.close()
    lines = dict(line.split("\t", 1) for line in ok(home.run("keys", "list")).splitlines())
    assert lines == {"forged": f"agent\tactive ({REFUSED})", "real": "agent\tactive"}
    listed = {key["name"]: key for key in json.loads(ok(home.run("keys", "list", "--json")))}
    assert listed["forged"]["sealed"] is False and listed["real"]["sealed"] is True


def test_audit_adopt_key_refuses_a_log_the_key_has_chained(tmp_path: Path) -> None:
    """`audit adopt-key` is for a log from before the key: over rows hashed with the key
    (the deployment row deleted) it refuses, and every other command refuses to start."""
    home = Home(tmp_path)
    ok(home.run("keys", "create", "--name", "real", "--role", "agent"))
    runtime = Runtime(home.settings())
    try:
        with runtime.store.transaction() as conn:
            entry = AuditEntry(event="queued", actor="real", tool="echo")
            runtime.audit.append(conn, [entry], at=runtime.clock())
        write(runtime, "DELETE FROM deployment")
    finally:
        runtime.close()
    adopted = home.run("audit", "adopt-key")
    assert adopted.returncode == 2
    assert "refused: this audit log was already chained with this deployment's key" in (
        adopted.stderr
    )
    listed = home.run("keys", "list")
    assert listed.returncode == 2
    assert "toolrouter audit adopt-key" in listed.stderr
    verified = home.run("audit", "verify", "--json")
    assert verified.returncode == 1
    assert not json.loads(verified.stdout)["ok"]


def test_a_moved_project_folder_is_told_where_its_key_is(tmp_path: Path) -> None:
    """The namespace follows the database's path: a state directory moved or renamed gets
    a new namespace, and a new key file beside the one the database was set up with."""
    home = Home(tmp_path)
    ok(home.run("keys", "create", "--name", "real", "--role", "agent"))
    namespace = Namespace.of(home.settings()).name
    moved = tmp_path / "moved"
    home.state_dir.rename(moved)
    home.state_dir, home.env["TOOLROUTER_STATE_DIR"] = moved, str(moved)
    listed = home.run("keys", "list")
    assert listed.returncode == 2
    assert f"under the namespace {namespace}" in listed.stderr
    assert f"set TOOLROUTER_NAMESPACE={namespace} in every process" in listed.stderr
    home.env["TOOLROUTER_NAMESPACE"] = namespace
    assert ok(home.run("keys", "list")).startswith("real\t")
