"""What agents and remote servers wrote reaches an operator's terminal as text to read,
never as commands to it: `toolrouter logs`, `up --verbose`, `tools` and `status` show
escape sequences, line breaks and hiding characters as their escapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from router.canonical import shown_as_text
from router.cli.children import Child
from router.cli.status import render

from ..support.launcher import REPO

# Retitle the terminal, plant a link, hide text, wipe the line, reorder it, ring, stop.
HOSTILE = (
    "path\x1b]0;pwned\x07"
    "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
    "\x1b[8mhidden\x1b[0m\r\x1b[2Kapproved\b\u202etxt.exe\u200b\x00\x9b2J"
)
SHOWN = (
    "path\\x1b]0;pwned\\x07"
    "\\x1b]8;;http://evil.example\\x1b\\click\\x1b]8;;\\x1b\\"
    "\\x1b[8mhidden\\x1b[0m\\r\\x1b[2Kapproved\\x08\\u202etxt.exe\\u200b\\x00\\x9b2J"
)


def assert_inert(output: bytes) -> None:
    """Nothing a terminal would act on: no C0 or C1 control but line breaks, no format
    characters (bidirectional overrides, zero-width ones)."""
    text = output.decode("utf-8")
    odd = [c for c in text if not c.isprintable() and c != "\n"]
    assert not odd, odd


def test_every_unprintable_character_is_shown_as_its_escape() -> None:
    assert shown_as_text(HOSTILE) == SHOWN
    assert shown_as_text("first\nsecond\ttab") == "first\\nsecond\\ttab"
    # What prints stays as written.
    assert shown_as_text("日本語 😀 [bold] \\x1b") == "日本語 😀 [bold] \\x1b"


def test_toolrouter_logs_shows_a_planted_line_as_text(tmp_path: Path) -> None:
    logs = tmp_path / "state" / "logs"
    logs.mkdir(parents=True)
    line = f"WARNING:router.api.app:POST /v1/approvals/{HOSTILE}/approve: client left\n"
    (logs / "api.log").write_bytes(b"INFO: started\n" + line.encode("utf-8"))
    (logs / "beat.log").write_bytes(b"beat ok\n")
    env = {
        **os.environ,
        "TOOLROUTER_STATE_DIR": str(tmp_path / "state"),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    for argv in (["logs", "api"], ["logs"]):
        done = subprocess.run(
            [sys.executable, "-m", "router.cli.main", *argv],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert_inert(done.stdout)
        assert f"/v1/approvals/{SHOWN}/approve".encode() in done.stdout, done.stdout
        # One log line stays one line on the terminal.
        assert len(done.stdout.splitlines()) == (2 if argv == ["logs", "api"] else 3)


NOTABLE = "tool server unreachable: x\x1b]0;t\x07 (down)"


def test_up_writes_and_echoes_a_process_line_as_text(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    program = f"print({HOSTILE!r}); print({NOTABLE!r})"
    echoed = Child("api", [sys.executable, "-c", program], tmp_path / "api.log")
    quiet = Child("beat", [sys.executable, "-c", program], tmp_path / "beat.log")
    echoed.start(dict(os.environ), 4)  # `up --verbose`
    quiet.start(dict(os.environ), None)  # `up`: notable lines only
    for child in (echoed, quiet):
        assert child.process is not None and child.pump is not None
        child.process.wait(timeout=30)
        child.pump.join(timeout=30)
        assert child.process.stdout is not None
        child.process.stdout.close()
    out = capfd.readouterr().out.encode("utf-8")
    assert_inert(out)
    assert f"api  | {SHOWN}\n".encode() in out, out
    assert b"beat: tool server unreachable: x\\x1b]0;t\\x07" in out, out
    # The log files, read with `tail` or `cat` as often as with `toolrouter logs`, too.
    for name in ("api", "beat"):
        written = (tmp_path / f"{name}.log").read_bytes()
        assert_inert(written)
        assert written.splitlines()[0] == SHOWN.encode(), written


def test_toolrouter_tools_shows_a_description_as_text(tmp_path: Path) -> None:
    # Imported MCP tools take their description from the server; a config stands in here.
    config = tmp_path / "tools.yaml"
    described = json.dumps(f"Read a file{HOSTILE}")
    config.write_text(
        "tools:\n"
        "  - name: lookup\n"
        '    handler: "router.tools.demo_tools:echo"\n'
        "    risk: low\n"
        f"    description: {described}\n",
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "TOOLROUTER_STATE_DIR": str(tmp_path / "state"),
        "TOOLROUTER_CONFIG": str(config),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-m", "router.cli.main", "tools"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == f"lookup\tlow\tungated\tRead a file{SHOWN}\n"


def test_toolrouter_status_shows_a_worker_name_as_text() -> None:
    # Workers answer "which queues?" through Redis, which anyone who can write to it can do.
    report = {
        "config": "tools.yaml",
        "state_dir": "/state",
        "api": {"ok": True, "url": "http://127.0.0.1:8000"},
        "database": {"ok": True, "url": "sqlite://", "pending_approvals": 0},
        "redis": {"ok": False, "url": "redis://", "error": f"refused{HOSTILE}"},
        "up": None,
        "workers": {"ok": True, "by_queue": {"tools.low": [f"celery@{HOSTILE}"]}},
    }
    text = render(report) + "\n"
    assert_inert(text.encode("utf-8"))
    assert f"worker(s) celery@{SHOWN}\n" in text and f"refused{SHOWN}\n" in text, text
