"""How long the command line takes a person: wall time of `toolrouter --help` and of
`toolrouter approvals list --json` against the running API, from process start to exit."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

COMMANDS = {"help": ["--help"], "approvals_list": ["approvals", "list", "--json"]}


def cli_start_ms(env: dict[str, str], runs: int) -> dict[str, Any]:
    """Median and worst of ``runs`` starts of each command, in milliseconds."""
    found: dict[str, Any] = {}
    for name, args in COMMANDS.items():
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "router.cli.main", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
            samples.append((time.perf_counter() - started) * 1000)
            if done.returncode != 0:
                raise RuntimeError(f"toolrouter {' '.join(args)} failed: {done.stderr!r}")
        found[name] = {"median_ms": statistics.median(samples), "max_ms": max(samples)}
    return found
