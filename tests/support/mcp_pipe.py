"""``toolrouter mcp`` fed a whole session through a pipe: the handshake, then the given
messages (a string is sent as the line it is), stdin closed at once, as a script or a
piping client does."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .launcher import REPO
from .stack import Stack


def piped_session(
    stack: Stack, messages: list[dict[str, Any] | str], *, version: str
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
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", "mcp", "--key", stack.keys["agent"]],
        env=stack.env,
        cwd=REPO,
        input="".join(
            (line if isinstance(line, str) else json.dumps(line)) + "\n"
            for line in [*handshake, *messages]
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
