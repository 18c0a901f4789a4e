"""Measuring toolrouter as a user starts it: ``toolrouter up``, Flower included.

``up`` runs the API, a worker per risk queue, the approval worker, beat and Flower. Flower
switches the workers' task events on while it runs, so every task costs the events Flower
reads; this part measures the same figures as the main one against that deployment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil

from router.client import AsyncClient, Client
from router.settings import Settings
from tests.support.launcher import REPO, free_port

from . import costs
from .celery_runs import PAIRED_CELERY_LATENCY
from .params import Params
from .plain_clients import plain_clients
from .stats import latency_ms, median_rate
from .toolrouter_runs import CONFIG, batch_runs, paired_latency, prepare, throughput, warm_up

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 120
# The processes `up` starts, by a word of their command line.
CHILDREN = {
    "api": "uvicorn",
    "worker": "worker -Q tools.",
    "approvals": "-Q approvals",
    "beat": " beat",
    "flower": " flower",
}


class Processes(Mapping[str, Any]):
    """``up``'s children by role (``worker-0``… for the risk workers), each counted with its
    own children (a worker's pool), found by their command lines whenever read."""

    def __init__(self, up: subprocess.Popen[bytes]) -> None:
        self.up = psutil.Process(up.pid)

    def __getitem__(self, name: str) -> Any:
        return self.current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.current())

    def __len__(self) -> int:
        return len(self.current())

    def current(self) -> dict[str, Any]:
        found: dict[str, list[psutil.Process]] = {}
        for child in self.up.children():
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            for role, word in CHILDREN.items():
                if word in line:
                    found.setdefault(role, []).append(child)
                    break
        return {
            f"{role}-{i}" if len(children) > 1 else role: child
            for role, children in found.items()
            for i, child in enumerate(children)
        }


def worker_total(cpu: dict[str, float]) -> dict[str, float]:
    """Per-role CPU, the risk workers (``worker-0``…) added up as ``worker``."""
    merged: dict[str, float] = {}
    for name, value in cpu.items():
        role = name.split("-", 1)[0] if name.startswith("worker-") else name
        merged[role] = round(merged.get(role, 0.0) + value, 2)
    return merged


class UpStack:
    """A fresh ``toolrouter up`` in a state directory of its own."""

    def __init__(self, database_url: str, redis_url: str, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.flower_port = free_port(), free_port()
        while self.flower_port == self.port:
            self.flower_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
        self.env.update(
            TOOLROUTER_DATABASE_URL=database_url,
            TOOLROUTER_REDIS_URL=redis_url,
            TOOLROUTER_STATE_DIR=str(state_dir),
            TOOLROUTER_CONFIG=str(CONFIG),
            TOOLROUTER_API_PORT=str(self.port),
            TOOLROUTER_FLOWER_PORT=str(self.flower_port),
            TOOLROUTER_FLOWER_PASSWORD="bench",
            PYTHONPATH=str(REPO),
        )
        self.settings = Settings(
            database_url=database_url, redis_url=redis_url, state_dir=state_dir, config=CONFIG
        )
        self.log = state_dir / "up.log"
        self.keys: dict[str, str] = {}
        self.up: subprocess.Popen[bytes] | None = None
        self.procs: Processes | None = None
        self.read_cpu: Any = None
        self.database_url = database_url

    def start(self) -> None:
        self.keys = prepare(self.settings)
        with self.log.open("wb") as log:
            self.up = subprocess.Popen(
                [sys.executable, "-m", "router.cli.main", "up"],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs = Processes(self.up)
        self.read_cpu = costs.reader(
            self.procs, costs.servers(self.settings.redis_url, self.database_url)
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Ready when a call has gone all the way round and Flower has seen its task: the
        workers' task events are then on, as for a user who opened Flower."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.client() as agent, httpx.Client(auth=("admin", "bench"), timeout=5) as web:
            while True:
                if self.up is None or self.up.poll() is not None:
                    raise RuntimeError(f"`toolrouter up` exited; see {self.log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"`toolrouter up` was not ready; see {self.log}")
                try:
                    done = agent.call("noop", {"i": -1}, wait_s=5)
                    tasks = web.get(f"http://127.0.0.1:{self.flower_port}/api/tasks?limit=1")
                    if done.ok and tasks.status_code == 200 and tasks.json():
                        return
                except (httpx.HTTPError, OSError, ValueError):
                    pass
                time.sleep(0.5)

    def client(self, who: str = "agent") -> Client:
        return Client(self.base_url, self.keys[who])

    def async_client(self, who: str = "agent") -> AsyncClient:
        return AsyncClient(self.base_url, self.keys[who])

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; killed if it has not stopped in time."""
        if self.up is None or self.up.poll() is not None:
            return
        os.killpg(self.up.pid, signal.SIGINT)
        try:
            self.up.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.up.pid, signal.SIGKILL)
            self.up.wait()


def run_up(params: Params, database_url: str, redis_url: str, state_dir: Path) -> dict[str, Any]:
    """The main figures against ``toolrouter up``; always stops it."""
    stack = UpStack(database_url, redis_url, state_dir)
    try:
        stack.start()
        with stack.client() as agent:
            warm_up(agent, params)
            runs, cpu = throughput(stack, params)
            figures: dict[str, Any] = {
                "e2e_throughput_per_s": median_rate(runs),
                "e2e_throughput_runs": runs,
                "e2e_cpu_ms_per_call": worker_total(cpu),
                "plain_clients": plain_clients(
                    stack.base_url, stack.keys["agent"], params, stack.read_cpu
                ),
            }
            ours, celery = paired_latency(agent, params, redis_url, state_dir)
            figures["latency"] = latency_ms(ours)
            figures[PAIRED_CELERY_LATENCY] = latency_ms(celery)
            submitted, _ = batch_runs(agent, params)
            figures["batch_submit_per_s"] = median_rate(submitted)
            figures["batch_submit_runs"] = submitted
        return figures
    finally:
        stack.stop()
