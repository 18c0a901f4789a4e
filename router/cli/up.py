"""`toolrouter up`: every process on one machine, stopped together on Ctrl-C.

Each child runs in its own session (process group), so stopping it also stops the
pool processes it forked; nothing is left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from ..constants import RISK_LEVELS
from ..errors import ConfigError, SchemaOutdated, Unavailable
from ..files import private_file
from ..messaging.celery_app import LOCAL_REDIS_URL, private_redis_url_file
from ..metrics import metrics_dir
from ..runtime import Runtime
from ..settings import Settings
from ..tools.config import config_in_use
from . import processes
from .demo import demo_keys_file, ensure_demo_keys
from .preflight import UpRefused, check_ports, hold_state_dir
from .privredis import redis_answers, start_private_redis

STOP_GRACE_S = 10.0


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    pumps: list[threading.Thread] = field(default_factory=list)


def _pump(name: str, stream: IO[bytes], width: int) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.write(f"{name:<{width}} | {line.decode('utf-8', 'replace')}")
        sys.stdout.flush()


def _stop(children: list[Child], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every process group, then SIGKILL whatever is still there after the grace."""
    for child in children:
        if child.process and child.process.poll() is None:
            _signal_group(child.process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        if child.process is None:
            continue
        try:
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # The leader may be gone while its pool children linger: always sweep the group.
        _signal_group(child.process, signal.SIGKILL)
        child.process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_up(settings: Settings) -> int:
    # The config first: a mistake in it stops `up` before anything is started or touched.
    checking = Runtime(settings)
    try:
        _ = checking.registry
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        checking.close()
    try:
        lock = hold_state_dir(settings)
    except UpRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        check_ports(settings)
        return _run(settings)
    except UpRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        lock.release()


def _run(settings: Settings) -> int:
    state_dir = settings.state_dir.resolve()
    children: list[Child] = []
    private_redis = None
    marker = private_redis_url_file(settings)
    marker.unlink(missing_ok=True)
    # Metric samples of an earlier run would be summed into this one's.
    shutil.rmtree(metrics_dir(settings), ignore_errors=True)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        if settings.redis_url:
            redis_url = settings.redis_url
        elif redis_answers(LOCAL_REDIS_URL):
            redis_url = LOCAL_REDIS_URL
        else:
            private_redis, redis_url = start_private_redis(state_dir)
            private_file(marker).write_text(redis_url, encoding="utf-8")
            print(f"started a private Redis at {redis_url} (data in {state_dir / 'redis'})")
        env = {
            **os.environ,
            "TOOLROUTER_REDIS_URL": redis_url,
            "TOOLROUTER_DATABASE_URL": settings.resolved_database_url,
            "TOOLROUTER_STATE_DIR": str(state_dir),
            "PYTHONUNBUFFERED": "1",
        }
        if settings.config_given or settings.config.is_file():
            env["TOOLROUTER_CONFIG"] = str(settings.config.resolve())
        runtime = Runtime(settings)
        try:
            runtime.prepare()
            tokens = ensure_demo_keys(settings, runtime.keys)
        except (ConfigError, SchemaOutdated, Unavailable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            runtime.close()
        password = processes.flower_password(settings)
        specs = [("api", processes.api_argv(settings))]
        specs += [(f"worker-{risk}", processes.worker_argv(settings, risk)) for risk in RISK_LEVELS]
        specs += [
            ("approvals", processes.approvals_argv(settings)),
            ("beat", processes.beat_argv(settings)),
            ("flower", processes.flower_argv(settings)),
        ]
        width = max(len(name) for name, _ in specs)
        for name, argv in specs:
            child = Child(name, argv)
            child.process = subprocess.Popen(
                argv,
                env={**env, **processes.flower_env(settings)} if name == "flower" else env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            assert child.process.stdout is not None
            pump = threading.Thread(
                target=_pump, args=(name, child.process.stdout, width), daemon=True
            )
            pump.start()
            child.pumps.append(pump)
            children.append(child)
        api_url = f"http://{settings.api_host}:{settings.api_port}"
        if _wait_healthy(api_url, children, stopping):
            _banner(settings, api_url, tokens, password)
        while not stopping.is_set():
            dead = [c for c in children if c.process and c.process.poll() is not None]
            if dead:
                print(
                    f"{dead[0].name} exited with {dead[0].process.returncode}; stopping",  # type: ignore[union-attr]
                    file=sys.stderr,
                )
                return 1
            stopping.wait(0.5)
        return 0
    finally:
        print("stopping all processes…", flush=True)
        _stop(children)
        if private_redis is not None:
            private_redis.terminate()
            try:
                private_redis.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                private_redis.kill()
            marker.unlink(missing_ok=True)
        print("stopped", flush=True)


def _wait_healthy(api_url: str, children: list[Child], stopping: threading.Event) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not stopping.is_set():
        if any(c.process and c.process.poll() is not None for c in children):
            return False
        try:
            if httpx.get(f"{api_url}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def _banner(settings: Settings, api_url: str, tokens: dict[str, str] | None, password: str) -> None:
    lines = [
        "",
        "toolrouter is up",
        f"  API      {api_url}   (OpenAPI: {api_url}/docs)",
        f"  Flower   http://127.0.0.1:{settings.flower_port}   "
        f"(user {settings.flower_user}, password {password})",
        f"  inbox    {api_url}/ui/",
        f"  state    {Path(settings.state_dir).resolve()}",
        f"  config   {config_in_use(settings.config, required=settings.config_given)}",
    ]
    if tokens:
        lines += [
            f"  demo agent key     {tokens.get('agent')}",
            f"  demo approver key  {tokens.get('approver')}",
            f"  (demo keys kept in {demo_keys_file(settings)})",
        ]
    lines += ["  Ctrl-C stops everything.", ""]
    print("\n".join(lines), flush=True)
