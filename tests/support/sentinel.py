"""A real Redis Sentinel group on loopback: a primary, a replica and three sentinels.

Debian's ``redis-server`` runs both roles (``--sentinel`` is what ``redis-sentinel`` runs).
Every process has its own port and folder; ``SentinelGroup.url`` is the ``sentinel://``
URL toolrouter is given, with ``MASTER`` as ``TOOLROUTER_REDIS_SENTINEL_MASTER``.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from .launcher import free_port
from .waiting import wait_for

MASTER = "toolrouter-primary"
# How long the sentinels wait before they call the primary down, and a failover's bound.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


def redis_server() -> str | None:
    return shutil.which("redis-server")


class SentinelGroup:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ports = {"primary": free_port(), "replica": free_port()}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports) + "/0"

    def _server(self, name: str, *extra: str) -> None:
        port = self.ports[name]
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(self.folder), "--dbfilename", f"{name}.rdb"]
        self._start(name, [*argv, *extra])

    def _start(self, name: str, argv: list[str]) -> None:
        with (self.folder / f"{name}.log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start(self) -> None:
        self._server("primary")
        primary = self.ports["primary"]
        self._server("replica", "--replicaof", "127.0.0.1", str(primary))
        for i, port in enumerate(self.sentinel_ports):
            config = self.folder / f"sentinel-{i}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.folder}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER} 1\n",
                encoding="utf-8",
            )
            self._start(f"sentinel-{i}", ["redis-server", str(config), "--sentinel"])
        wait_for(self._ready, 60, "the Sentinel group (replica in sync, sentinels agreed)")

    def _ready(self) -> bool:
        try:
            replica = self.client("replica").info("replication")
            if replica.get("master_link_status") != "up":
                return False
            for port in self.sentinel_ports:
                with redis.Redis(port=port, socket_timeout=1) as sentinel:
                    state = sentinel.sentinel_master(MASTER)
                    if int(state.get("num-other-sentinels", 0)) < 2:
                        return False
                    if int(state.get("num-slaves", 0)) < 1:
                        return False
            return True
        except redis.RedisError:
            return False

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], socket_timeout=2, socket_connect_timeout=2)

    def primary_port(self) -> int | None:
        """The primary's port as the sentinels name it now (a majority of them)."""
        seen: list[int] = []
        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=1) as sentinel:
                    host_port = sentinel.sentinel_get_master_addr_by_name(MASTER)
                    if host_port:
                        seen.append(int(host_port[1]))
            except redis.RedisError:
                continue
        for port in set(seen):
            if seen.count(port) >= 2:
                return port
        return None

    def kill_primary(self) -> float:
        """SIGKILL the primary; returns when it was killed (``time.monotonic``)."""
        process = self.processes["primary"]
        process.send_signal(signal.SIGKILL)
        process.wait()
        return time.monotonic()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
