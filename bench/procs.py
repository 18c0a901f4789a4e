"""Starting and stopping the processes under test: each in its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent


class Processes:
    """Named child processes, each logging to ``<log_dir>/<name>.log``."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir, self.env = log_dir, env
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            child = subprocess.Popen(
                argv,
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.children[name] = child
        return child

    def check(self) -> None:
        for name, child in self.children.items():
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited ({child.returncode}):\n{self.log(name)}")

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop_all(self) -> None:
        for child in self.children.values():
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for child in self.children.values():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        self.children.clear()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by each named process and its children (a worker's pool)."""
        used: dict[str, float] = {"client": time.process_time()}  # this process: the client
        for name, child in self.children.items():
            try:
                root = psutil.Process(child.pid)
                tree = [root, *root.children(recursive=True)]
                used[name] = sum(sum(p.cpu_times()[:2]) for p in tree)
            except psutil.Error:
                used[name] = float("nan")
        return used

    def wait_http(self, url: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{url} did not answer within {timeout} s")
