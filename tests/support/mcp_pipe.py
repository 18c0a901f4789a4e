"""``toolrouter mcp`` fed a whole session through a pipe: the handshake, then the given
messages (a string or bytes is sent as the line it is), stdin closed at once, as a script or a
piping client does."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .launcher import REPO
from .stack import Stack


def piped_session(
    stack: Stack, messages: list[dict[str, Any] | str | bytes], *, version: str
) -> subprocess.CompletedProcess[str]:
    """Runs ``toolrouter mcp`` as the stack's agent; ``initialize`` has id 1."""
    handshake = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "pipe", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    argv = [sys.executable, "-m", "router.cli.main", "mcp", "--key", stack.keys["agent"]]
    done = subprocess.run(
        argv,
        env=stack.env,
        cwd=REPO,
        input=b"".join(_line(message) + b"\n" for message in [*handshake, *messages]),
        capture_output=True,
        timeout=120,
    )
    return subprocess.CompletedProcess(
        argv, done.returncode, done.stdout.decode(), done.stderr.decode("utf-8", "replace")
    )


def _line(message: dict[str, Any] | str | bytes) -> bytes:
    if isinstance(message, bytes):
        return message
    return (message if isinstance(message, str) else json.dumps(message)).encode()
