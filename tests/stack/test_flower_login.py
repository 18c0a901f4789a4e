"""Flower's login is the one the settings name, for real: `toolrouter flower` started as the
operator starts it.

Flower reads its basic-auth logins from a comma-separated list, so a password with a comma
would be checked as the part before the comma (and the rest as a login of its own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ..support.launcher import REPO, free_port

# Redis db of the modules that start their own processes (10-15 are the test-suite's).
FLOWER_REDIS_DB = 10
START_TIMEOUT_S = 90


def flower_env(tmp_path: Path, redis_base: str, port: int, password: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLROUTER_")}
    env.update(
        TOOLROUTER_SECRETS_DIR=os.environ["TOOLROUTER_SECRETS_DIR"],
        TOOLROUTER_STATE_DIR=str(tmp_path / "state"),
        TOOLROUTER_REDIS_URL=f"{redis_base}/{FLOWER_REDIS_DB}",
        TOOLROUTER_FLOWER_PORT=str(port),
        TOOLROUTER_FLOWER_PASSWORD=password,
        PYTHONUNBUFFERED="1",
    )
    return env


def flower_argv() -> list[str]:
    return [sys.executable, "-m", "router.cli.main", "flower"]


def status_with(url: str, user: str, password: str) -> int:
    return httpx.get(f"{url}/api/workers", auth=(user, password), timeout=5).status_code


@pytest.mark.timeout(180)
def test_a_password_with_a_comma_stops_flower_at_start_up(tmp_path: Path, redis_base: str) -> None:
    port = free_port()
    env = flower_env(tmp_path, redis_base, port, "a,longsecretpart")
    refused = subprocess.run(
        flower_argv(), env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: TOOLROUTER_FLOWER_PASSWORD: "), refused.stderr
    assert "comma" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(httpx.ConnectError):
        status_with(f"http://127.0.0.1:{port}", "admin", "a")
    print(f"`toolrouter flower` with a comma in its password: exit {refused.returncode}")


@pytest.mark.timeout(180)
def test_flower_accepts_the_whole_password_and_nothing_shorter(
    tmp_path: Path, redis_base: str
) -> None:
    port = free_port()
    password = "pa:ss w$rd;longsecretpart"
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "flower.log"
    with log_path.open("wb") as log:
        flower = subprocess.Popen(
            flower_argv(),
            env=flower_env(tmp_path, redis_base, port, password),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert flower.poll() is None, log_path.read_text(errors="replace")
            try:
                whole = status_with(url, "admin", password)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, log_path.read_text(errors="replace")
                time.sleep(0.3)
        shorter = {guess: status_with(url, "admin", guess) for guess in ("pa", "pa:ss w$rd", "")}
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        try:
            flower.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(flower.pid, signal.SIGKILL)
            flower.wait()
    assert whole == 200
    assert shorter == {guess: 401 for guess in shorter}
    print(f"Flower login: whole password {whole}, shorter ones {sorted(set(shorter.values()))}")
