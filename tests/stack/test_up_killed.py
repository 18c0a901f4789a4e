"""`toolrouter up` killed with SIGKILL (or by the OOM killer) cannot stop its processes
itself: they stop all the same, rather than go on serving unseen by `toolrouter status`
and holding the ports the next `up` needs.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest

from .test_up import START_TIMEOUT_S, Up, alive, kill_all, up_env, up_redis_url

__all__ = ["up_redis_url"]  # the fixture, shared with test_up

# Idle processes stop warm on SIGTERM within seconds; this is the deadline, not the wait.
STOPPED_WITHIN_S = 60


@pytest.mark.timeout(300)
def test_processes_of_a_killed_up_stop(tmp_path: Path, up_redis_url: str) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    up = Up(up_env(cwd, state_dir, up_redis_url), cwd)
    started: list[psutil.Process] = []
    try:
        up.wait_for(
            "'toolrouter is up'", lambda lines: "toolrouter is up" in lines, START_TIMEOUT_S
        )
        recorded = json.loads((state_dir / "up.json").read_text(encoding="utf-8"))["processes"]
        leaders = [psutil.Process(pid) for pid in recorded.values()]
        started = leaders + [child for p in leaders for child in p.children(recursive=True)]
        assert len(alive(started)) == len(started) > len(recorded)

        up.process.send_signal(signal.SIGKILL)
        up.process.wait(timeout=10)
        _, left = psutil.wait_procs(alive(started), timeout=STOPPED_WITHIN_S)
        assert left == [], [(p.pid, p.cmdline()[:6]) for p in left]
        print(
            f"`up` killed with SIGKILL: {len(recorded)} processes and "
            f"{len(started) - len(recorded)} of their children stopped, none left"
        )
    finally:
        kill_all(started)
        up.close()
