"""A process's sessions to the MCP servers it imports tools from, against real servers: a
call given up on while its session starts leaves the session to the next call, and a server
that never answers its start is stopped, its process with it."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import psutil
import pytest

from router.tools import mcp_client
from router.tools.mcp_client import McpConnections, StdioServer

from ..support.waiting import wait_for
from .test_mcp_tools import MCP_BIN, need_mcp_servers


class GivenUp(Exception):
    """Raised by the interval timer, as a worker's time limit interrupts a call."""


@pytest.fixture
def give_up_after() -> Iterator[object]:
    """Arms a timer that raises ``GivenUp`` in this thread, as ``workers.call_limits`` does."""

    def raise_given_up(signum: int, frame: FrameType | None) -> None:
        raise GivenUp()

    previous = signal.signal(signal.SIGALRM, raise_given_up)

    def arm(seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, seconds)

    try:
        yield arm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def running(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in command:
            found.append(int(entry.name))
    return found


def test_a_call_given_up_on_while_its_session_starts_leaves_it_to_the_next_call(
    give_up_after: object, tmp_path: Path
) -> None:
    need_mcp_servers()
    ready = tmp_path / "may-start"
    # The server starts once the test allows it: the first call is given up on meanwhile.
    script = f'while [ ! -e "{ready}" ]; do sleep 0.05; done; exec "$0" stdio'
    server = StdioServer(
        command="/bin/sh", args=("-c", script, str(MCP_BIN / "mcp-server-everything"))
    )
    connections = McpConnections({"ev": server}, log_dir=tmp_path)
    try:
        give_up_after(0.5)  # type: ignore[operator]
        with pytest.raises(GivenUp):
            connections.call_tool("ev", "echo", {"message": "first"}, timeout=30)
        ready.touch()
        answer = connections.call_tool("ev", "echo", {"message": "second"}, timeout=30)
        assert "second" in str(answer.content), answer
    finally:
        connections.close()


def test_a_server_that_never_answers_its_start_is_stopped_with_its_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_client, "CONNECT_TIMEOUT_S", 1.0)
    marker = f"never-answers-{uuid.uuid4().hex}"
    silent = f"import sys  # {marker}\nfor line in sys.stdin: pass"
    server = StdioServer(command=sys.executable, args=("-c", silent))
    connections = McpConnections({"silent": server}, log_dir=tmp_path)
    try:
        for _ in range(3):
            with pytest.raises(ConnectionError, match="no session within"):
                connections.call_tool("silent", "anything", {}, timeout=5)
        # Each start given up is stopped: none of them is left running.
        wait_for(lambda: not running(marker), 30, "the silent servers stopped")
    finally:
        connections.close()
    assert running(marker) == []


def test_a_call_after_its_server_exited_starts_it_again_rather_than_being_lost(
    tmp_path: Path,
) -> None:
    need_mcp_servers()
    server = StdioServer(command=str(MCP_BIN / "mcp-server-everything"), args=("stdio",))
    connections = McpConnections({"ev": server}, log_dir=tmp_path)
    try:
        first = connections.call_tool("ev", "echo", {"message": "first"}, timeout=30)
        assert "first" in str(first.content), first
        servers = [
            child
            for child in psutil.Process().children(recursive=True)
            if "mcp-server-everything" in " ".join(child.cmdline()) and child.name() == "node"
        ]
        assert len(servers) == 1, [s.cmdline() for s in servers]
        servers[0].kill()
        # Its session ends as its output does (the only way to know short of calling).
        wait_for(lambda: connections._sessions["ev"].done.is_set(), 30, "the session ended")
        # Never sent to the dead server, so not lost: sent to a fresh one.
        again = connections.call_tool("ev", "echo", {"message": "again"}, timeout=30)
        assert "again" in str(again.content), again
    finally:
        connections.close()
