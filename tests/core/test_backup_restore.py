"""The backup and restore how-to, followed as written on SQLite: a restored backup is
reported as rows missing after the signed head until the operator sets the head aside."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from router.audit import head as audit_head
from router.audit.log import AuditEntry
from router.runtime import Runtime
from router.settings import Settings

from ..stack.test_cli import Home


def append_and_sign(runtime: Runtime, count: int) -> int:
    """``count`` audit rows, then the signed head the approval worker would export."""
    with runtime.store.transaction() as conn:
        runtime.audit.append(
            conn,
            [AuditEntry(event="queued", actor="test", tool=f"t{i}") for i in range(count)],
            at=runtime.clock(),
        )
    path = audit_head.head_file(runtime.settings, runtime.namespace.name)
    return audit_head.export(
        runtime.store, runtime.keyring, runtime.namespace.name, path, runtime.clock
    ).seq


def test_a_restored_backup_verifies_once_the_old_head_is_set_aside(tmp_path: Path) -> None:
    home = Home(tmp_path)
    settings = Settings(state_dir=home.state_dir)
    runtime = Runtime(settings)
    runtime.prepare(check_tools=False)
    database = home.state_dir / "toolrouter.db"
    backup = tmp_path / "backup.db"
    try:
        backed_up = append_and_sign(runtime, 5)
        # The how-to's backup command without the sqlite3 program: SQLite's online backup.
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); "
                "d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()",
                str(database),
                str(backup),
            ],
            check=True,
        )
        newest = append_and_sign(runtime, 3)
        head_file = audit_head.head_file(settings, runtime.namespace.name)
    finally:
        runtime.close()
    assert newest == backed_up + 3

    shutil.copyfile(backup, database)
    for leftover in ("toolrouter.db-wal", "toolrouter.db-shm"):
        (home.state_dir / leftover).unlink(missing_ok=True)

    refused = home.run("audit", "verify")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        f"rows after seq {backed_up} are missing: the signed head names seq {newest}"
        in refused.stderr
    )
    assert refused.stderr.splitlines()[-1] == "error: audit log does not verify: 1 problem"

    head_file.rename(head_file.with_name("audit-head.before-restore.json"))
    restored = Runtime(settings)
    try:
        restored.prepare(check_tools=False)
        assert append_and_sign(restored, 0) == backed_up
    finally:
        restored.close()
    verified = home.run("audit", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"audit chain ok: {backed_up} rows verified in the database" in verified.stdout
