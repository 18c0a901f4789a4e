"""What a call costs beyond the launched processes: the database server's and Redis's CPU,
and the resident memory of the API, the worker and the approval worker.

The servers are found by the port their URL names (the process listening on it, and its
children: PostgreSQL's backends). A server's CPU counts everything it did meanwhile: other
databases on the same PostgreSQL server, other Redis databases on the same Redis (the test
suite's, when it runs beside the bench) count too. SQLite has no server: its work is done
inside the API and worker processes, and counted there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from subprocess import Popen
from types import TracebackType
from urllib.parse import urlsplit

import psutil

from .stats import cpu_seconds

MIB = 1024 * 1024
# How often the memory under load is sampled, in seconds.
SAMPLE_INTERVAL_S = 0.1
# Pool processes can be replaced: the sampler looks for each tree's processes this often.
REFRESH_EVERY = 10


def _port(url: str, default: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default


def listener(url: str, default_port: int, name: str) -> psutil.Process | None:
    """The local process listening on the port of ``url`` if its name has ``name`` in it,
    else None: a remote server, one this user may not see, or a proxy in front of one (a
    container's), whose CPU would not be the server's."""
    host, port = _port(url, default_port)
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    for conn in connections:
        listening = conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port
        if listening and conn.pid is not None:
            try:
                process = psutil.Process(conn.pid)
                return process if name in process.name() else None
            except psutil.Error:
                return None
    return None


def server_cpu_seconds(server: psutil.Process) -> float:
    """CPU time of a server and all its children so far, exited ones included: a child
    that exited (a PostgreSQL backend whose connection closed) and was waited for left its
    time in its parent's ``children_*`` times, so the sum does not drop when it goes."""
    try:
        times = server.cpu_times()
        used = times.user + times.system + times.children_user + times.children_system
        for child in server.children(recursive=True):
            try:
                used += sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return used
    except psutil.Error:
        return float("nan")


def servers(redis_url: str, database_url: str | None) -> dict[str, psutil.Process]:
    """The servers whose CPU a run counts: ``redis``, and ``database`` for PostgreSQL."""
    found: dict[str, psutil.Process] = {}
    redis_server = listener(redis_url, 6379, "redis")
    if redis_server is not None:
        found["redis"] = redis_server
    if database_url is not None and database_url.startswith("postgresql"):
        url = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
        database = listener(url, 5432, "postgres")
        if database is not None:
            found["database"] = database
    return found


def reader(
    processes: Mapping[str, Popen[bytes]], server_processes: Mapping[str, psutil.Process]
) -> Callable[[], dict[str, float]]:
    """A ``cpu_seconds`` reading that also counts the servers'."""

    def read() -> dict[str, float]:
        used = cpu_seconds(processes)
        for name, server in server_processes.items():
            used[name] = server_cpu_seconds(server)
        return used

    return read


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _rss(tree: list[psutil.Process]) -> int:
    total = 0
    for process in tree:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total


def rss_mib(processes: Mapping[str, Popen[bytes]]) -> dict[str, float]:
    """Resident memory of each process with its children (an API's, a worker's pool), MiB."""
    return {name: round(_rss(_tree(p.pid)) / MIB, 1) for name, p in processes.items()}


class PeakMemory:
    """The highest resident memory of each process tree, sampled every ~100 ms in a
    background thread while the ``with`` block runs. ``cpu_s``: the CPU the sampling thread
    itself used, which the bench takes off the client's (it runs in the client's process)."""

    def __init__(self, processes: Mapping[str, Popen[bytes]]) -> None:
        self.processes = dict(processes)
        self.peak = {name: 0 for name in self.processes}
        self.samples = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _run(self) -> None:
        started = time.thread_time()
        trees: dict[str, list[psutil.Process]] = {}
        while not self._stop.is_set():
            if self.samples % REFRESH_EVERY == 0:
                trees = {name: _tree(p.pid) for name, p in self.processes.items()}
            for name, tree in trees.items():
                self.peak[name] = max(self.peak[name], _rss(tree))
            self.samples += 1
            self.cpu_s = time.thread_time() - started
            self._stop.wait(SAMPLE_INTERVAL_S)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> dict[str, float]:
        return {name: round(peak / MIB, 1) for name, peak in self.peak.items()}
