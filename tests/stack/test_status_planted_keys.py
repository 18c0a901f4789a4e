"""A key planted in Redis at a queue's name (Redis is not trusted) blinds neither `/metrics`
nor `toolrouter status` to the other queues, and status names the queue rather than say
Redis is down: a real API, a real worker and a real `toolrouter status`. Nor does an
`up.json` that `up` did not write (the state directory is not trusted) stop status.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from router.cli.children import served_port_file
from router.cli.preflight import hold_state_dir
from router.messaging.namespace import Namespace

from ..support.launcher import REPO
from ..support.stack import Stack, own_stack

REDIS_DB = 10
# No worker consumes it here, so none deletes the planted key before status reads it.
PLANTED_QUEUE = "maintenance"
TOOL_QUEUES = ("tools.low", "tools.medium", "tools.high")


@pytest.fixture(scope="module")
def stack(
    redis_base: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("planted-keys")
    with own_stack(state_dir, f"{redis_base}/{REDIS_DB}", request, keys={}) as stack:
        stack.start_api()
        stack.start_worker()
        yield stack


def status(stack: Stack, *flags: str, port_set: bool = True) -> subprocess.CompletedProcess[str]:
    """`toolrouter status` on ``stack``, told the API's port unless ``port_set`` is false."""
    port = {"TOOLROUTER_API_PORT": stack.base_url.rsplit(":", 1)[1]} if port_set else {}
    env = {k: v for k, v in stack.env.items() if k != "TOOLROUTER_API_PORT"}
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", "status", *flags],
        env={**env, **port},
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_json(stack: Stack) -> tuple[int, dict[str, Any], str]:
    """`status --json`'s exit code and report, and the text `status` shows people."""
    done = status(stack, "--json")
    return done.returncode, json.loads(done.stdout), status(stack).stdout


def queue_depth_lines(stack: Stack) -> dict[str, float]:
    body = httpx.get(f"{stack.base_url}/metrics", timeout=30).text
    return {
        line.split('queue="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("toolrouter_queue_depth{")
    }


def test_a_string_at_a_queues_key_leaves_the_other_queues_reported(stack: Stack) -> None:
    planted = Namespace.of(stack.settings).queue_keys(PLANTED_QUEUE)[0]
    client = redis.Redis.from_url(stack.env["TOOLROUTER_REDIS_URL"])
    client.set(planted, "not a list")
    try:
        depths = queue_depth_lines(stack)
        code, report, text = status_json(stack)
    finally:
        client.delete(planted)
        client.close()

    assert {queue: depths.get(queue) for queue in TOOL_QUEUES} == dict.fromkeys(TOOL_QUEUES, 0.0)
    assert PLANTED_QUEUE not in depths
    redis_part, workers = report["redis"], report["workers"]
    assert redis_part["ok"] is True, redis_part
    assert redis_part["queue_depths"][PLANTED_QUEUE] is None
    assert workers["ok"] is True, workers
    assert all(workers["by_queue"][queue] for queue in TOOL_QUEUES), workers
    assert (code, report["healthy"]) == (1, False)
    shown = next(line for line in text.splitlines() if f" {PLANTED_QUEUE} " in line)
    assert shown.startswith("DOWN") and "not a list" in shown, text
    assert "Redis does not answer" not in text
    print(
        f"a string at {PLANTED_QUEUE}'s key: /metrics depths for {sorted(depths)}; status "
        f"redis ok={redis_part['ok']} workers ok={workers['ok']} exit={code}; {shown.strip()}"
    )


@pytest.mark.parametrize(
    "planted", ["[]", '{"processes": []}', '{"processes": {"api": "1", "beat": 2.5}}']
)
def test_a_planted_up_json_leaves_status_whole(stack: Stack, planted: str) -> None:
    lock = hold_state_dir(stack.settings)  # as a running `up` holds it
    try:
        (stack.state_dir / "up.json").write_text(planted, encoding="utf-8")
        done = status(stack, "--json")
    finally:
        (stack.state_dir / "up.json").unlink(missing_ok=True)
        lock.release()
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["up"] in (None, {}), report["up"]
    assert report["redis"]["ok"] and report["database"]["ok"], report


def test_status_reaches_the_api_on_the_port_up_serves(stack: Stack) -> None:
    """A second deployment's `up` serves another port than the default; `status` (and every
    command that talks to the API) run in its folder without the setting reach that port,
    recorded beside the key: a port planted in the state directory, which is not trusted,
    would have the commands send their key wherever it names."""
    port = int(stack.base_url.rsplit(":", 1)[1])

    def api_seen() -> dict[str, Any]:
        done = status(stack, "--json", port_set=False)
        assert "Traceback" not in done.stderr, done.stderr
        return dict(json.loads(done.stdout)["api"])

    lock = hold_state_dir(stack.settings)  # as a running `up` holds it
    recorded = served_port_file(stack.settings)
    try:
        (stack.state_dir / "up.json").write_text(json.dumps({"api_port": port}), "utf-8")
        assert api_seen()["url"] == "http://127.0.0.1:8000"
        (stack.state_dir / "up.json").write_text("[" * 100_000, encoding="utf-8")
        recorded.write_text(str(port), encoding="utf-8")
        seen = api_seen()
        assert seen["url"] == f"http://127.0.0.1:{port}" and seen["ok"], seen
        recorded.write_text("99999", encoding="utf-8")
        assert api_seen()["url"] == "http://127.0.0.1:8000"
    finally:
        recorded.unlink(missing_ok=True)
        (stack.state_dir / "up.json").unlink(missing_ok=True)
        lock.release()
