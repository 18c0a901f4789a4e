"""The approver's and the operator's command line, against a running stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from router.runtime import Runtime
from router.settings import Settings

from ..support.launcher import REPO
from ..support.stack import Stack


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def stack_cli_env(stack: Stack, key: str) -> dict[str, str]:
    env = dict(stack.env)
    env["TOOLROUTER_API_PORT"] = stack.base_url.rsplit(":", 1)[1]
    env["TOOLROUTER_KEY"] = stack.keys[key]
    return env


def test_approver_lists_and_approves_from_the_command_line(stack: Stack) -> None:
    with stack.client("agent") as http:
        call = http.post("/v1/calls", json={"tool": "high_echo", "args": {"to": "cli"}}).json()
    env = stack_cli_env(stack, "approver")
    listed = cli(env, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert call["request_id"] in listed.stdout
    assert '"to": "cli"' in listed.stdout
    approved = cli(
        env, "approvals", "approve", call["request_id"], "--reason", "ok", "--wait", "20"
    )
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert json.loads(approved.stdout)["value"] == {"to": "cli"}
    decided = cli(env, "approvals", "list", "--status", "approved")
    line = next(line for line in decided.stdout.splitlines() if call["request_id"] in line)
    assert "expires in" not in line and line.endswith("  approved by approver"), line
    replay = cli(env, "approvals", "approve", call["request_id"])
    assert replay.returncode == 1
    assert json.loads(replay.stdout) == {
        "ok": False,
        "error": f"unknown request: {call['request_id']}",
    }


def test_approver_denies_from_the_command_line(stack: Stack) -> None:
    with stack.client("agent") as http:
        call = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()
    denied = cli(stack_cli_env(stack, "approver"), "approvals", "deny", call["request_id"])
    assert denied.returncode == 0, denied.stdout + denied.stderr
    assert json.loads(denied.stdout)["status"] == "denied"


def test_a_request_id_holding_a_path_decides_nothing_but_that_id(stack: Stack) -> None:
    """The id is one path segment: ``deny 'req-…/approve?'`` must not reach the approve
    endpoint of that request (nor ``approve 'req-…/deny#'`` its deny endpoint)."""
    env = stack_cli_env(stack, "approver")
    for verb, other in (("deny", "approve"), ("approve", "deny")):
        with stack.client("agent") as http:
            call = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()
        for tail in ("?", "#", "?x="):
            crafted = f"{call['request_id']}/{other}{tail}"
            done = cli(env, "approvals", verb, crafted)
            assert done.returncode == 1, done.stdout + done.stderr
            assert json.loads(done.stdout)["ok"] is False
        with stack.client("approver") as http:
            request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
        assert request["status"] == "pending", (verb, request)


def test_audit_archive_then_verify_with_archives(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
    env.update(
        {
            "TOOLROUTER_STATE_DIR": str(tmp_path),
            "TOOLROUTER_SECRETS_DIR": os.environ["TOOLROUTER_SECRETS_DIR"],
            "PYTHONPATH": str(REPO),
            # A hot window of under a second, so the rows just written are "old".
            "TOOLROUTER_AUDIT_HOT_DAYS": "0.000005",
        }
    )
    created = cli(env, "keys", "create", "--name", "a", "--role", "agent")
    assert created.returncode == 0, created.stderr
    runtime = Runtime(Settings(state_dir=tmp_path, config=REPO / "tests" / "tools.yaml"))
    runtime.prepare()
    for _ in range(3):
        runtime.dispatcher.submit("a", "no-such-tool", {})
    runtime.close()
    time.sleep(0.6)  # let the rows age past the sub-second hot window
    archived = cli(env, "audit", "archive")
    assert archived.returncode == 0, archived.stderr
    assert "archived 3 rows through seq 3" in archived.stdout
    verified = cli(env, "audit", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "segment audit-000000000001-000000000003.jsonl.gz: 3 rows ok" in verified.stdout
    assert (
        "audit chain ok: 0 rows verified in the database, and 3 in archive segments"
        in verified.stdout
    )
    exported = cli(env, "audit", "export")
    assert exported.returncode == 0 and exported.stdout == ""
    # A tampered manifest is reported like any other problem, not as a traceback.
    with (tmp_path / "audit-archive" / "manifest.jsonl").open("a") as manifest:
        manifest.write("garbage{\n")
    tampered = cli(env, "audit", "verify")
    assert tampered.returncode == 2 and "Traceback" not in tampered.stderr, tampered.stderr
    assert "problem: manifest line 2 is not JSON" in tampered.stderr
    report = json.loads(cli(env, "audit", "verify", "--json").stdout)
    assert report["ok"] is False
    assert {"seq": None, "reason": "manifest line 2 is not JSON"} in report["problems"]
