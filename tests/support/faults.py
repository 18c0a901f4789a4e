"""Helpers of the fault suites: a Redis of their own to kill, ledgers to count runs, deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router.cli.privredis import free_port, redis_answers, redis_server_binary
from router.runtime import Runtime
from router.settings import Settings

from .launcher import wait_for_log
from .stack import TEST_CONFIG, spawn_worker, stack_env


@dataclass
class PrivateRedis:
    """A ``redis-server`` of one test's own, without persistence, on a fixed loopback port
    (so it can be killed and come back empty on the same address)."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--save",
            "",
            "--appendonly",
            "no",
            *self.extra,
        ]
        with (self.data_dir / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 15
        while not redis_answers(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """``kill -9``: no shutdown, no save; every queued and unacked message is gone."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


# Settings of a stack whose recovery a test waits for: the reconciler publishes a lost
# message again after a second, the reaper looks for lost runs twice a second.
FAST_RECOVERY = {
    "TOOLROUTER_REQUEUE_AFTER_S": "1",
    "TOOLROUTER_RECONCILER_INTERVAL_S": "0.5",
    "TOOLROUTER_REAPER_INTERVAL_S": "0.5",
}


def ledger_runs(path: Path) -> dict[str, int]:
    """``call id -> number of runs`` from the ``ledger`` tool's file (one line a run)."""
    runs: dict[str, int] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            call_id = line.split()[0]
            runs[call_id] = runs.get(call_id, 0) + 1
    return runs


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A real worker with one pool process on ``tools.low``, ready to take messages."""
    worker = spawn_worker("one", env, log)
    wait_for_log(log, "ready.", worker)
    return worker


@dataclass
class PrivateStack:
    """A private Redis, a SQLite database and the runtime to submit through."""

    redis: PrivateRedis
    runtime: Runtime
    env: dict[str, str]
    dir: Path

    def submit_ledger(self, ledger: Path, n: int, sleep: float = 0) -> str:
        result = self.runtime.dispatcher.submit(
            "agent", "ledger", {"path": str(ledger), "sleep": sleep, "n": n}
        )
        assert result.call_id is not None, result
        return result.call_id


@contextmanager
def private_stack_in(tmp_path: Path, **settings: Any) -> Iterator[PrivateStack]:
    """A private Redis, a SQLite database in ``tmp_path`` and a runtime on both, with
    ``settings`` for that runtime."""
    private = PrivateRedis(tmp_path / "redis")
    private.start()
    database_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    settings = Settings(
        database_url=database_url,
        redis_url=private.url,
        state_dir=tmp_path,
        config=TEST_CONFIG,
        **settings,
    )
    runtime = Runtime(settings)
    runtime.prepare()
    env = stack_env(database_url=database_url, redis_url=private.url, state_dir=tmp_path)
    try:
        yield PrivateStack(private, runtime, env, tmp_path)
    finally:
        runtime.close()
        private.stop()


def status(runtime: Runtime, call_id: str) -> str:
    with runtime.store.reading() as conn:
        row = runtime.store.get(conn, call_id)
    assert row is not None
    return row.status
