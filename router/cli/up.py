"""`toolrouter up`: every process on one machine, stopped together on Ctrl-C.

Quiet by default: the terminal gets one banner and a line per notable event; each
process's own output goes to ``<state_dir>/logs/<process>.log`` (``toolrouter logs``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from ..constants import RISK_LEVELS
from ..errors import ConfigError, SchemaOutdated, Unavailable
from ..files import private_file
from ..messaging.celery_app import LOCAL_REDIS_URL, private_redis_url_file
from ..messaging.redis_clients import is_sentinel
from ..metrics import metrics_dir
from ..runtime import Runtime
from ..settings import Settings
from ..tools.config import config_in_use
from . import processes
from .children import (
    Child,
    open_logs,
    record_running,
    running_file,
    served_config_file,
    served_port_file,
    stop_all,
)
from .common import local_url, os_problem
from .demo import demo_keys_file, ensure_demo_keys
from .preflight import UpRefused, check_ports, hold_state_dir, public_url_warning
from .privredis import redis_answers, start_private_redis

# How long the processes get to answer (the API) and consume (the workers) at start.
READY_TIMEOUT_S = 120.0
PRIVATE_REDIS_GRACE_S = 10.0


def run_up(settings: Settings, *, verbose: bool = False) -> int:
    # The config first: a mistake in it stops `up` before anything is started or touched.
    # The tools built here (MCP servers connected) serve the start-up below too.
    runtime = Runtime(settings)
    try:
        _ = runtime.registry
        lock = hold_state_dir(settings)
    except (ConfigError, UpRefused, OSError) as exc:
        runtime.close()
        # An OSError: the state directory cannot be made or locked.
        text = os_problem(exc) if isinstance(exc, OSError) else str(exc)
        print(f"error: {text}", file=sys.stderr)
        return 2
    try:
        check_ports(settings)
        notifies = bool(runtime.tool_config.notifications.channels)
        if warning := public_url_warning(settings, notifies, on_its_own=False):
            print(warning, file=sys.stderr)
        return _run(settings, runtime, verbose)
    except UpRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        runtime.close()
        lock.release()


class Signals:
    """The first Ctrl-C (SIGTERM, or the terminal closing) stops warm; a second one stops
    at once, and during start-up, before any process runs, a second one aborts it."""

    def __init__(self) -> None:
        self.stopping, self.stop_now = threading.Event(), threading.Event()
        self.children_started = False
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        if not self.stopping.is_set():
            self.stopping.set()
            return
        self.stop_now.set()
        if not self.children_started:
            raise KeyboardInterrupt


def _run(settings: Settings, runtime: Runtime, verbose: bool) -> int:
    state_dir = settings.state_dir.resolve()
    children: list[Child] = []
    private_redis = None
    marker = private_redis_url_file(settings)
    marker.unlink(missing_ok=True)
    # Metric samples of an earlier run would be summed into this one's.
    shutil.rmtree(metrics_dir(settings), ignore_errors=True)
    signals = Signals()
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
        try:
            runtime.prepare()
            tokens = ensure_demo_keys(settings, runtime.keys)
        except (ConfigError, SchemaOutdated, Unavailable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            # Its connections are not needed while the processes run.
            runtime.close()
        password = processes.flower_password(settings)
        if signals.stopping.is_set():
            return 0  # stopped during start-up: nothing to start
        signals.children_started = True
        children = _children(settings)
        width = max(len(child.name) for child in children)
        for child in children:
            child_env = {**env, **processes.flower_env(settings)} if child.name == "flower" else env
            child.start(child_env, width if verbose else None)
        record_running(settings, children)
        print(f"started {', '.join(c.name for c in children)}; logs in {state_dir / 'logs'}")
        api_url = local_url(settings.api_host, settings.api_port)
        shown = _wait_ready(api_url, children, signals.stopping)
        if shown:
            _banner(settings, api_url, tokens, password, redis_url)
        elif not signals.stopping.is_set() and not _dead(children):
            print(
                f"not every process was ready within {READY_TIMEOUT_S:g} s; still waiting "
                "(`toolrouter logs` shows why)",
                file=sys.stderr,
            )
        while not signals.stopping.is_set():
            dead = _dead(children)
            if dead:
                print(
                    f"{dead.name} exited with {dead.exit_code}; stopping everything "
                    f"(its log: {dead.log_path})",
                    file=sys.stderr,
                )
                return 1
            if not shown and _ready(api_url, children):
                shown = True
                _banner(settings, api_url, tokens, password, redis_url)
            signals.stopping.wait(0.5)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        # From here a Ctrl-C means "at once", whatever ended the run, and never an exception.
        signals.stopping.set()
        signals.children_started = True
        if children:
            print(
                f"stopping: running calls get up to {settings.stop_grace_s:g} s to finish, "
                "queued calls stay queued (Ctrl-C again to stop at once)",
                flush=True,
            )
        stop_all(children, settings.stop_grace_s, signals.stop_now)
        running_file(settings).unlink(missing_ok=True)
        served_port_file(settings).unlink(missing_ok=True)
        served_config_file(settings).unlink(missing_ok=True)
        if private_redis is not None:
            private_redis.terminate()
            try:
                private_redis.wait(timeout=PRIVATE_REDIS_GRACE_S)
            except subprocess.TimeoutExpired:
                private_redis.kill()
            marker.unlink(missing_ok=True)
        if children or private_redis is not None:
            print("stopped", flush=True)  # a refusal before any start says its one line only


def _children(settings: Settings) -> list[Child]:
    logs = open_logs(settings)
    specs = [("api", processes.api_argv(settings), False)]
    specs += [
        (f"worker-{risk}", processes.worker_argv(settings, risk), True) for risk in RISK_LEVELS
    ]
    specs += [
        ("approvals", processes.approvals_argv(settings), True),
        ("notifications", processes.notifications_argv(settings), True),
        ("beat", processes.beat_argv(settings), False),
        ("flower", processes.flower_argv(settings), False),
    ]
    return [Child(name, argv, logs / f"{name}.log", ready) for name, argv, ready in specs]


def _dead(children: list[Child]) -> Child | None:
    return next((c for c in children if c.exit_code is not None), None)


def _wait_ready(api_url: str, children: list[Child], stopping: threading.Event) -> bool:
    """Until the API answers and every Celery worker consumes: then a call can run."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not stopping.is_set():
        if _dead(children):
            return False
        if _ready(api_url, children):
            return True
        time.sleep(0.2)
    return False


def _ready(api_url: str, children: list[Child]) -> bool:
    if not all(c.ready.is_set() for c in children if c.waits_for_ready):
        return False
    try:
        return httpx.get(f"{api_url}/healthz", timeout=1).status_code == 200
    except (httpx.HTTPError, httpx.InvalidURL):
        return False


def _banner(
    settings: Settings,
    api_url: str,
    tokens: dict[str, str] | None,
    password: str,
    redis_url: str,
) -> None:
    lines = [
        "",
        "toolrouter is up",
        f"  API      {api_url}   (OpenAPI: {api_url}/docs)",
        f"  Flower   {local_url(settings.flower_host, settings.flower_port)}   "
        f"(user {settings.flower_user}, password {password})",
        f"  inbox    {api_url}/ui/",
        f"  state    {Path(settings.state_dir).resolve()}",
        f"  config   {config_in_use(settings.config, required=settings.config_given)}",
        f"  database {safe_url(settings.resolved_database_url)}",
        f"  Redis    {safe_url(redis_url)}",
    ]
    if tokens:
        lines += [
            f"  demo agent key     {tokens.get('agent')}",
            f"  demo approver key  {tokens.get('approver')}",
            f"  (demo keys kept in {demo_keys_file(settings)})",
        ]
    lines += ["  Ctrl-C stops everything.", ""]
    print("\n".join(lines), flush=True)


def safe_url(url: str) -> str:
    """``url`` without its passwords, for a terminal others may see. A Sentinel address
    lists several URLs, separated by ``;``; any other URL is one, whatever its password
    holds."""
    if is_sentinel(url):
        return ";".join(_without_password(part) for part in url.split(";"))
    return _without_password(url)


def _without_password(url: str) -> str:
    # Up to the last "@": a password may hold "@", ";", "/" and "#" unescaped. Where a
    # query holds an "@" too, more is hidden than the password, never less.
    scheme, sep, rest = url.partition("://")
    userinfo, at, place = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{place}"
