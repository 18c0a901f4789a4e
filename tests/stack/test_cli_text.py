"""What the command line shows people of what agents wrote is text to read, never
something their terminal acts on: a real API and real `toolrouter` processes, whose raw
output bytes are checked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.launcher import REPO
from ..support.stack import Stack, own_stack

REDIS_DB = 10
# A tool whose schema checks values under keys the caller chooses: a rejection names them.
CONFIG = """
tools:
  - name: fetch
    handler: "tests.fixture_tools:echo"
    risk: low
    input_schema:
      type: object
      properties:
        headers: {type: object, additionalProperties: {type: string}}
"""
# Retitle the terminal and hide text; wipe the line and write a verdict of one's own.
RETITLE = "X\x1b]0;pwned\x07\x1b[8mhidden\x1b[0m\u202eY"
WIPE = "\r\x1b[2K  line 9: approved"


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    with own_stack(
        tmp_path_factory.mktemp("cli-text"),
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"]},
        tools=CONFIG,
    ) as stack:
        stack.start_api()
        yield stack


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[bytes]:
    port = stack.base_url.rsplit(":", 1)[1]
    env = {**stack.env, "TOOLROUTER_API_PORT": port, "TOOLROUTER_KEY": stack.keys["agent"]}
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )


def assert_inert(output: bytes) -> None:
    odd = [c for c in output.decode("utf-8") if not c.isprintable() and c != "\n"]
    assert not odd, odd


def test_batch_submit_shows_a_rejected_lines_argument_keys_as_text(
    stack: Stack, tmp_path: Path
) -> None:
    path = tmp_path / "calls.jsonl"
    lines = [{"tool": "fetch", "args": {"headers": {key: 5}}} for key in (RETITLE, WIPE)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = cli(stack, "batch", "submit", str(path))
    assert done.returncode == 1, done.stderr
    assert_inert(done.stderr)
    shown = done.stderr.decode("utf-8").splitlines()
    must = 'must satisfy type "string"'
    retitle = "X\\x1b]0;pwned\\x07\\x1b[8mhidden\\x1b[0m\\u202eY"
    assert f"  line 1: invalid arguments: headers/{retitle}: {must}" in shown, shown
    wipe = "\\r\\x1b[2K  line 9: approved"
    assert f"  line 2: invalid arguments: headers/{wipe}: {must}" in shown, shown
