"""``toolrouter call --wait`` interrupted with Ctrl-C: the call may be accepted already, so
the command says so, and how its idempotency key gets the same call back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ..support.launcher import REPO
from ..support.stack import Stack
from ..support.trust import call_rows_by
from ..support.waiting import wait_for
from .test_api_calls import temporary_key


def cli_env(stack: Stack, token: str) -> dict[str, str]:
    """The stack's settings, its API's port, and the key the commands use."""
    port = stack.base_url.rsplit(":", 1)[1]
    return {**stack.env, "TOOLROUTER_API_PORT": port, "TOOLROUTER_KEY": token}


def test_an_interrupted_wait_says_the_call_goes_on_and_its_key_gets_it_back(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = temporary_key(stack, ["agent"])
    env = cli_env(stack, token)
    release = tmp_path / "release"
    args = json.dumps({"until": str(release)})
    command = [sys.executable, "-m", "router.cli.main", "call", "hold", "--args", args]
    command += ["--idempotency-key", f"refund-{name}"]
    waiting = subprocess.Popen(
        [*command, "--wait", "120"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: call_rows_by(stack, name) == 1, 60, "the call stored")
        waiting.send_signal(signal.SIGINT)
        out, err = waiting.communicate(timeout=60)
    finally:
        release.touch()
        waiting.kill()
    assert waiting.returncode == 130, (out, err)
    assert err == (
        "interrupted: the call may have been accepted; run the command again to get it: with"
        " the same --idempotency-key it is that call, not a second one\n"
    )
    again = subprocess.run(
        [*command, "--wait", "60"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "succeeded"
    assert call_rows_by(stack, name) == 1


def test_an_interrupted_batch_wait_still_prints_the_batch_id_last(
    stack: Stack, tmp_path: Path
) -> None:
    _, token = temporary_key(stack, ["agent"])
    env = cli_env(stack, token)
    release = tmp_path / "release"
    batch = tmp_path / "calls.jsonl"
    batch.write_text(json.dumps({"tool": "hold", "args": {"until": str(release)}}) + "\n")
    said: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "router.cli.main", "batch", "submit", str(batch), "--wait"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as waiting:
        assert waiting.stdout is not None and waiting.stderr is not None
        reader = threading.Thread(target=lambda: said.extend(waiting.stderr), daemon=True)
        reader.start()
        try:
            # Submitted, and told so: the command is in its wait.
            wait_for(lambda: any(": 1 calls, 1 new" in line for line in said), 60, "the summary")
            waiting.send_signal(signal.SIGINT)
            out = waiting.stdout.read()
            waiting.wait(timeout=60)
            reader.join(60)
        finally:
            release.touch()
            waiting.kill()
    assert waiting.returncode == 130, (out, said)
    assert out.splitlines()[-1].startswith("batch_"), out
    assert "interrupted while waiting: the batch goes on\n" in said
