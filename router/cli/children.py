"""The processes `toolrouter up` runs: each in its own session, its output kept in a log
file under the state directory (and echoed with ``--verbose``), stopped warm."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..canonical import shown_as_text
from ..files import private_dir, private_file
from ..messaging.namespace import Namespace
from ..tools.unreachable import MARK as UNREACHABLE_MARK
from .bound import bound_to_this_process

if TYPE_CHECKING:
    from ..settings import Settings

# What a Celery worker logs once it consumes: "celery@host ready."
READY_MARK = b"ready."
# Log lines worth a line on the terminal even when quiet, each at most once a minute.
NOTABLE = (UNREACHABLE_MARK.encode(),)
NOTABLE_EVERY_S = 60.0


def running_file(settings: Settings) -> Path:
    """Where a running `up` lists its processes (for `toolrouter status`)."""
    return settings.state_dir.resolve() / "up.json"


def record_running(settings: Settings, children: list[Child]) -> None:
    processes = {c.name: c.process.pid for c in children if c.process is not None}
    text = json.dumps({"pid": os.getpid(), "processes": processes}, sort_keys=True)
    private_file(running_file(settings)).write_text(text, encoding="utf-8")
    # Beside the key, not in the state directory: a command sends its key to this port.
    port_file = served_port_file(settings)
    private_dir(port_file.parent.parent)
    private_dir(port_file.parent)
    private_file(port_file).write_text(str(settings.api_port), encoding="utf-8")
    from ..tools.config import config_in_use  # here: --help needs no config parser

    # Another shell's settings may name another config: `status` tells the one served.
    config = config_in_use(settings.config, required=settings.config_given)
    private_file(served_config_file(settings)).write_text(config, encoding="utf-8")


def served_port_file(settings: Settings) -> Path:
    """Where a running `up` records the API's port, in the deployment's secrets folder."""
    return settings.resolved_secrets_dir / Namespace.of(settings).name / "api-port"


def served_config_file(settings: Settings) -> Path:
    """Where a running `up` records the config it serves, beside the API's port."""
    return served_port_file(settings).with_name("config")


def served_config(settings: Settings) -> str | None:
    """The config a running `up` of this deployment serves, as its banner named it."""
    try:
        return served_config_file(settings).read_text(encoding="utf-8").strip() or None
    except (OSError, ValueError):
        return None


def api_port(settings: Settings) -> int:
    """The API's port: the settings' where they name one; else the one a running `up` of
    this deployment serves (a second deployment on this machine has its own, and a command
    run in its folder without the setting must not reach the first's)."""
    if "api_port" in settings.model_fields_set:
        return settings.api_port
    try:
        recorded = served_port_file(settings).read_text(encoding="utf-8").strip()
        # Checked as the setting is: the same bounds.
        return settings.model_validate({**settings.model_dump(), "api_port": recorded}).api_port
    except (OSError, ValueError):
        return settings.api_port


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    # Whether `up` waits for the line that says the process consumes (Celery workers).
    waits_for_ready: bool = False
    process: subprocess.Popen[bytes] | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    pump: threading.Thread | None = None
    _shown: dict[bytes, float] = field(default_factory=dict)

    def start(self, env: dict[str, str], echo_width: int | None) -> None:
        self.process = subprocess.Popen(
            # Stopped with `up` even when `up` is killed and cannot stop it.
            bound_to_this_process(self.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.pump = threading.Thread(
            target=self._pump, args=(self.process.stdout, echo_width), daemon=True
        )
        self.pump.start()

    def _pump(self, stream: IO[bytes], echo_width: int | None) -> None:
        """Every line to the log file; with ``echo_width``, to the terminal too. Lines quote
        what agents and remote servers wrote, so both get them as text to read
        (``shown_as_text``): a terminal that shows the file or the echo obeys none of it."""
        with private_file(self.log_path).open("ab") as log:
            for line in iter(stream.readline, b""):
                text = shown_as_text(line.decode("utf-8", "replace").removesuffix("\n"))
                log.write(text.encode("utf-8") + b"\n")
                log.flush()
                if self.waits_for_ready and line.rstrip().endswith(READY_MARK):
                    self.ready.set()
                if echo_width is not None:
                    sys.stdout.write(f"{self.name:<{echo_width}} | {text}\n")
                    sys.stdout.flush()
                elif (event := self._notable(line)) is not None:
                    print(f"{self.name}: {event}", flush=True)

    def _notable(self, line: bytes) -> str | None:
        """The notable part of ``line``, unless the same was shown in the last minute (per
        server: the words after the mark, up to the reason in brackets)."""
        for mark in NOTABLE:
            at = line.find(mark)
            if at < 0:
                continue
            what = line[at:].split(b"(", 1)[0]
            now = time.monotonic()
            if now - self._shown.get(what, -NOTABLE_EVERY_S) < NOTABLE_EVERY_S:
                return None
            self._shown[what] = now
            return shown_as_text(line[at:].decode("utf-8", "replace").strip())
        return None

    @property
    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()


def open_logs(settings: Settings) -> Path:
    """The folder of the processes' logs; `up` appends to them and never deletes them."""
    return private_dir(settings.logs_dir)


def stop_all(children: list[Child], grace_s: float, stop_now: threading.Event) -> None:
    """SIGTERM to each process (never to its pool children, which the process stops itself
    once their work is done); after ``grace_s``, or at once when ``stop_now`` is set,
    SIGKILL to each whole process group."""
    running = [c for c in children if c.process is not None and c.exit_code is None]
    for child in running:
        assert child.process is not None
        _signal(child.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(c.exit_code is None for c in running) and not stop_now.is_set():
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for child in children:
        if child.process is None:
            continue
        # The leader may be gone while its pool children linger: always sweep the group.
        try:
            os.killpg(child.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child.process.wait()
        if child.pump is not None:
            child.pump.join(timeout=5)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
