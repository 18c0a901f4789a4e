"""Reading the audit log in tests: through the API as an operator, or from a runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from router.audit import log as audit
from router.runtime import Runtime

from .launcher import REPO
from .stack import Stack

PAGE = 1000


def audit_rows(
    stack: Stack, *, after_seq: int = 0, key: str = "operator", **filters: Any
) -> list[dict[str, Any]]:
    """Every row matching ``filters`` after ``after_seq``, paged through the API."""
    rows: list[dict[str, Any]] = []
    with stack.client(key) as http:
        while True:
            params = {**filters, "after_seq": after_seq, "limit": PAGE}
            response = http.get("/v1/audit", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            rows.extend(page["rows"])
            if len(page["rows"]) < PAGE:
                return rows
            after_seq = page["next_after_seq"]


def audit_events(stack: Stack, call_id: str, key: str = "operator") -> list[tuple[str, str]]:
    """(event, actor) of one call's rows, in order."""
    return [(row["event"], row["actor"]) for row in audit_rows(stack, key=key, call_id=call_id)]


def audit_total(stack: Stack) -> int:
    """The last ``seq``: how many rows the log has had."""
    rows = audit_rows(stack)
    return int(rows[-1]["seq"]) if rows else 0


def call_audit_rows(runtime: Runtime, call_id: str) -> list[dict[str, Any]]:
    with runtime.store.reading() as conn:
        return audit.query(conn, call_id=call_id)


def call_audit_events(runtime: Runtime, call_id: str) -> list[str]:
    return [row["event"] for row in call_audit_rows(runtime, call_id)]


def verify_on_the_cli(runtime: Runtime) -> tuple[int, dict[str, Any]]:
    """``toolrouter audit verify --json`` as an operator runs it on ``runtime``'s
    deployment: its exit status and its report."""
    settings = runtime.settings
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "TOOLROUTER_DATABASE_URL": settings.resolved_database_url,
        "TOOLROUTER_REDIS_URL": settings.redis_url,
        "TOOLROUTER_STATE_DIR": str(settings.state_dir),
        "TOOLROUTER_SECRETS_DIR": str(settings.secrets_dir),
        "TOOLROUTER_CONFIG": str(settings.config),
    }
    done = subprocess.run(
        [sys.executable, "-m", "router.cli.main", "audit", "verify", "--json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)
