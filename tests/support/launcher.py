"""Starting and stopping the processes of a toolrouter: each in its own process group,
logging to ``<log_dir>/<name>.log``. The test stacks and ``bench/`` both launch with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Launcher:
    """Named child processes sharing one environment."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir, self.env = log_dir, env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        path = self.log_path(name)
        offset = log_size(path)
        with path.open("ab") as log:
            process = subprocess.Popen(
                argv,
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # Where this run of the process starts writing: ``wait_for_log`` reads from here.
        process.log_offset = offset  # type: ignore[attr-defined]
        self.processes[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_log(self, name: str, needle: str, timeout: float = 60) -> None:
        wait_for_log(self.log_path(name), needle, self.processes[name], timeout)

    def wait_for_http(self, name: str, url: str, timeout: float = 60) -> None:
        wait_for_http(url, self.processes[name], self.log(name), timeout)

    def check(self) -> None:
        """Fail, with its log, if any process has exited."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = self.log(name)[-4000:]
                raise RuntimeError(f"{name} exited ({process.returncode}):\n{tail}")

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        stop_group(self.processes.pop(name), sig, timeout)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)


def stop_group(
    process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20
) -> None:
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=timeout)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def wait_for_http(
    url: str, process: subprocess.Popen[bytes], log: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited before {url} answered:\n{log}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def wait_for_log(
    path: Path,
    needle: str,
    process: subprocess.Popen[bytes],
    timeout: float = 60,
    *,
    after: int | None = None,
) -> None:
    """Wait until ``needle`` is logged by ``process``: after byte ``after`` of the file
    (default: where the process started writing), so a line an earlier run of the same
    process left in the log does not count."""
    start = getattr(process, "log_offset", 0) if after is None else after
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_bytes()[start:].decode(errors="replace") if path.exists() else ""
        if needle in text:
            return
        if process.poll() is not None:
            raise RuntimeError(f"process exited before logging {needle!r}:\n{text}")
        time.sleep(0.1)
    raise RuntimeError(f"{needle!r} not logged within {timeout} s in {path}")
