"""A real toolrouter for end-to-end tests: uvicorn API and Celery workers as subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from router.cli import processes
from router.runtime import Runtime
from router.settings import Settings

from . import services
from .launcher import REPO, Launcher, free_port, wait_for_http, wait_for_log

TEST_CONFIG = REPO / "tests" / "tools.yaml"


@dataclass
class Stack:
    """The processes of one toolrouter, their settings, and keys to talk to it."""

    env: dict[str, str]
    state_dir: Path
    base_url: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return Settings(
            **{
                k.removeprefix("TOOLROUTER_").lower(): v
                for k, v in self.env.items()
                if k.startswith("TOOLROUTER_")
            }
        )

    def client(self, key: str = "agent", timeout: float = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[key]}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __post_init__(self) -> None:
        self.launcher = Launcher(self.state_dir, self.env)
        self.processes = self.launcher.processes

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        return self.launcher.start(name, argv)

    def start_api(self, timeout: float = 60) -> None:
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        self.start("api", processes.api_argv(self.settings, port=port))
        wait_for_http(f"{self.base_url}/healthz", self.processes["api"], self.log("api"), timeout)

    def start_worker(
        self,
        name: str = "worker",
        queues: str = "tools.low,tools.medium,tools.high",
        concurrency: int = 2,
    ) -> subprocess.Popen[bytes]:
        process = self.start(name, worker_argv(name, queues, concurrency=concurrency))
        wait_for_log(self.state_dir / f"{name}.log", "ready.", process)
        return process

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        self.launcher.stop(name, sig, timeout)

    def stop_all(self) -> None:
        self.launcher.stop_all()

    def log(self, name: str) -> str:
        return self.launcher.log(name)


TOOL_QUEUES = "tools.low,tools.medium,tools.high"


def start_with_recovery(stack: Stack, *, tool_concurrency: int = 2, api: bool = True) -> None:
    """Workers on the tool queues and on ``maintenance``, ``celery beat`` (the reaper and
    the reconciler) and, if asked, the API: started together, then awaited, since each
    takes seconds to boot. The fault suites run the recovery this way."""
    started = {
        "tools": (worker_argv("tools", TOOL_QUEUES, concurrency=tool_concurrency), "ready."),
        "maintenance": (worker_argv("maintenance", "maintenance", concurrency=1), "ready."),
        "beat": (processes.beat_argv(stack.settings), "beat: Starting..."),
    }
    for name, (argv, _) in started.items():
        stack.start(name, argv)
    if api:
        stack.start_api()
    for name, (_, needle) in started.items():
        wait_for_log(stack.state_dir / f"{name}.log", needle, stack.processes[name])


def spawn_worker(
    name: str, env: dict[str, str], log: Path, *, queues: str = "tools.low", concurrency: int = 1
) -> subprocess.Popen[bytes]:
    """A worker of a test's own, in its own process group, logging to ``log``."""
    launcher = Launcher(log.parent, env)
    return launcher.start(log.stem, worker_argv(name, queues, concurrency=concurrency))


def worker_argv(name: str, queues: str, *, concurrency: int) -> list[str]:
    """A Celery worker on ``queues``, as the tests run it."""
    return processes.celery(
        "worker",
        "-Q",
        queues,
        "-n",
        f"{name}@%h",
        "-P",
        "prefork",
        "-c",
        str(concurrency),
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    )


def stack_env(
    *, database_url: str, redis_url: str, state_dir: Path, **extra: str
) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLROUTER_")}
    env.update(
        {
            "TOOLROUTER_DATABASE_URL": database_url,
            "TOOLROUTER_REDIS_URL": redis_url,
            "TOOLROUTER_STATE_DIR": str(state_dir),
            "TOOLROUTER_SECRETS_DIR": os.environ.get(
                "TOOLROUTER_SECRETS_DIR", str(state_dir.parent / "secrets")
            ),
            "TOOLROUTER_CONFIG": str(TEST_CONFIG),
            # Short recovery windows, so tests of the reaper and reconciler finish quickly.
            "TOOLROUTER_LEASE_GRACE_S": "2",
            "TOOLROUTER_REQUEUE_AFTER_S": "3",
            "TOOLROUTER_REAPER_INTERVAL_S": "1",
            "TOOLROUTER_RECONCILER_INTERVAL_S": "1",
            # Long enough for an approval worker on a loaded machine to answer in time
            # (tests/stack/test_worker_start.py relies on the value).
            "TOOLROUTER_DECISION_TIMEOUT_S": "15",
            # One API process unless a test asks for more (tests/stack/test_api_processes.py).
            "TOOLROUTER_API_PROCESSES": "1",
            "PYTHONPATH": str(REPO),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def python() -> str:
    return sys.executable


@contextmanager
def own_stack(
    state_dir: Path,
    redis_url: str,
    request: pytest.FixtureRequest,
    *,
    keys: Mapping[str, list[str]],
    backend: str = "sqlite",
    tools: str | None = None,
    **env: str,
) -> Iterator[Stack]:
    """A stack of a test's own, none of its processes started yet: a fresh database, a
    flushed Redis database and ``keys`` (name to roles) made in it, and ``env`` on top of
    ``stack_env``; ``tools``, the text of its config file, written into ``state_dir``. Its
    processes are stopped, Redis flushed and the database dropped after."""
    if tools is not None:
        config = state_dir / "toolrouter.yaml"
        config.write_text(tools, encoding="utf-8")
        env = {**env, "TOOLROUTER_CONFIG": str(config)}
    databases = services.database_for(backend, state_dir, request)
    services.flush(redis_url)
    env = stack_env(database_url=next(databases), redis_url=redis_url, state_dir=state_dir, **env)
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    for name, roles in keys.items():
        stack.keys[name] = runtime.keys.create(name, roles)
    runtime.close()
    try:
        yield stack
    finally:
        stack.stop_all()
        services.flush(redis_url)
        databases.close()
