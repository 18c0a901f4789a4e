"""A PostgreSQL server of a test's own: its own cluster, folder and port, so the test may
cut it off, stop its helpers or kill it without touching the suite's server."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import psutil
import pytest
from sqlalchemy import create_engine, text

from .waiting import wait_for

AS_POSTGRES = ["runuser", "-u", "postgres", "--"]
# The server's helpers that write the log or data pages on their own: with them stopped,
# only a backend's durable commit writes the log.
LOG_WRITERS = ("walwriter", "background writer", "checkpointer")


def postgres_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        _cannot_run("PostgreSQL's server binaries are not installed")
    return found[-1]


def _cannot_run(reason: str) -> NoReturn:
    """Skip where this machine cannot start a server of its own; under CI it must."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def init_cluster(folder: Path) -> Path:
    """A new cluster in ``folder`` (which must not exist), trusting local connections; its
    data directory. PostgreSQL's own user must reach ``folder``'s parent."""
    if os.geteuid() != 0:
        _cannot_run("a server of the test's own runs as PostgreSQL's user: root is needed")
    folder.mkdir(mode=0o700)
    subprocess.run(["chown", "-R", "postgres:postgres", str(folder.parent)], check=True)
    data = folder / "data"
    subprocess.run(
        [*AS_POSTGRES, postgres_bin("initdb"), "-D", str(data), "-A", "trust"],
        check=True,
        capture_output=True,
    )
    return data


def serve(
    folder: Path,
    options: Sequence[str],
    wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
) -> subprocess.Popen[bytes]:
    """Run the cluster in ``folder`` (``init_cluster``) with ``options`` (``-c name=value``
    pairs), its log in ``folder/server.log``; ``wrap`` runs it elsewhere (a namespace)."""
    command = [*AS_POSTGRES, postgres_bin("postgres"), "-D", str(folder / "data"), *options]
    with (folder / "server.log").open("ab") as log:
        return subprocess.Popen(
            wrap(command), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


class CrashablePostgres:
    """A server on 127.0.0.1:``port`` that the test can crash: every process killed at
    once, so what was in its shared memory and not yet written is gone, then started
    again (crash recovery replays the log on disk)."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.process: subprocess.Popen[bytes] | None = None
        init_cluster(folder)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = [
            *("-c", "listen_addresses=127.0.0.1", "-c", f"port={self.port}"),
            *("-c", f"unix_socket_directories={self.folder}", "-c", "autovacuum=off"),
        ]
        self.process = serve(self.folder, options)
        try:
            wait_for(self._answers, 60, f"PostgreSQL on port {self.port}")
        except BaseException:
            print((self.folder / "server.log").read_text(errors="replace")[-4000:])
            raise

    def _answers(self) -> bool:
        engine = create_engine(self.url("postgres"))
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False
        finally:
            engine.dispose()

    def create_database(self, name: str) -> str:
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        engine.dispose()
        return self.url(name)

    def _processes(self) -> list[psutil.Process]:
        assert self.process is not None
        postmaster = psutil.Process(self.process.pid)
        # ``runuser`` may stay in between as the server's parent.
        return [postmaster, *postmaster.children(recursive=True)]

    def hold_log(self) -> None:
        """Stop the helpers that write the log or flush it on their own (``LOG_WRITERS``):
        from now on a commit that does not wait for the disk stays in memory."""
        stopped = []
        for process in self._processes():
            try:
                title = " ".join(process.cmdline())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # a backend that was ending
            if any(f"postgres: {name}" in title for name in LOG_WRITERS):
                process.send_signal(signal.SIGSTOP)
                stopped.append(title)
        assert len(stopped) == len(LOG_WRITERS), stopped

    def crash(self) -> None:
        """Kill every process of the server at once: what it had not written is lost."""
        processes = self._processes()
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(processes, timeout=60)
        assert self.process is not None
        self.process.wait(timeout=60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.crash()
