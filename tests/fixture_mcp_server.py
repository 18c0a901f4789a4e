"""A real MCP server (the official SDK, over stdio) for what the reference servers lack:
audio, an answer larger than a completion message, content nested past the limit, an
error that comes with an image, an image tool the tests' config caches, a tool that
takes its server down mid-call, one that stalls past its timeout, one whose answer is not
JSON-RPC, one that writes bytes that are not UTF-8, and one that leaves a process running.

Run as ``python -m tests.fixture_mcp_server`` from the repository root.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import wave
from pathlib import Path

import anyio
from mcp import types
from mcp.server.mcpserver import MCPServer

server = MCPServer("media")
READ_ONLY = types.ToolAnnotations(read_only_hint=True)
# Where the protocol's own lines go (``__main__`` sets it).
WIRE = 1
# The PNG signature: a block that is an image in name only is enough for these tests.
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode("ascii")
# How long ``stall`` holds its answer: past the timeout of every tool of the tests' config.
STALL_S = 30


def wav(frames: int) -> str:
    """``frames`` frames of 8 kHz mono 8-bit silence, as base64 WAV."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(8000)
        out.writeframes(b"\x80" * frames)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@server.tool(annotations=READ_ONLY)
def beep(frames: int = 80) -> types.CallToolResult:
    """A beep: a caption, the audio, and its facts as structured content."""
    return types.CallToolResult(
        content=[
            types.TextContent(text="a short beep"),
            types.AudioContent(data=wav(frames), mime_type="audio/wav"),
        ],
        structured_content={"frames": frames, "rate": 8000},
    )


@server.tool(annotations=READ_ONLY)
def chart() -> types.CallToolResult:
    """A caption and an image (the config caches this one)."""
    return types.CallToolResult(
        content=[
            types.TextContent(text="the chart"),
            types.ImageContent(data=PNG, mime_type="image/png"),
        ]
    )


@server.tool(annotations=READ_ONLY)
def nested_meta(depth: int) -> types.CallToolResult:
    """A text block whose ``_meta`` nests ``depth`` levels deep."""
    meta: object = "bottom"
    for _ in range(depth):
        meta = [meta]
    return types.CallToolResult(content=[types.TextContent(text="deep", _meta={"nest": meta})])


@server.tool(annotations=READ_ONLY)
def broken_chart() -> types.CallToolResult:
    """An error, with an image beside its text."""
    return types.CallToolResult(
        content=[
            types.TextContent(text="the chart could not be drawn"),
            types.ImageContent(data=PNG, mime_type="image/png"),
        ],
        is_error=True,
    )


@server.tool()
def exit_mid_call(ledger: str, run: str) -> str:
    """Note ``run`` in the file ``ledger``, then exit before answering: the tool acted and
    its caller never hears of it."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(run + "\n")
    os._exit(1)


@server.tool()
async def stall(ledger: str, stalls: int) -> str:
    """Note the run in the file ``ledger``; the first ``stalls`` runs then answer long after
    any caller's timeout, the next at once."""
    with open(ledger, "a", encoding="utf-8") as out:
        out.write("ran\n")
    runs = len(Path(ledger).read_text(encoding="utf-8").splitlines())
    if runs <= stalls:
        await anyio.sleep(STALL_S)
    return f"answered run {runs}"


@server.tool(annotations=READ_ONLY)
async def unreadable_answer(kind: str) -> str:
    """Answer with a line no JSON-RPC reader takes (``kind``: nested 100,000 deep, or NaN
    and a 5,000-digit integer), then never with a real one."""
    value = b"[" * 100_000 + b"]" * 100_000 if kind == "deep" else b"[NaN, " + b"9" * 5000 + b"]"
    os.write(WIRE, b'{"jsonrpc": "2.0", "id": 2, "result": {"content": [], "a": ' + value + b"}}\n")
    await anyio.sleep_forever()
    return "never"


@server.tool(annotations=READ_ONLY)
def endless_answer() -> str:
    """Begin an answer, and never end its line."""
    os.write(WIRE, b'{"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "')
    chunk = b"a" * 65536
    while True:
        os.write(WIRE, chunk)


@server.tool(annotations=READ_ONLY)
def bad_bytes() -> str:
    """Log a line holding bytes that are not UTF-8, then answer."""
    os.write(
        WIRE,
        b'{"jsonrpc": "2.0", "method": "notifications/message", '
        b'"params": {"level": "info", "data": "\xff\xfe"}}\n',
    )
    return "still here"


@server.tool(annotations=READ_ONLY)
def spawn_child(pidfile: str) -> str:
    """Start a long sleep the server never waits for, its pid written to ``pidfile``."""
    child = subprocess.Popen(["sleep", "600"])
    Path(pidfile).write_text(str(child.pid), encoding="utf-8")
    return "spawned"


if __name__ == "__main__":
    # The real stdout, kept before the SDK points fd 1 at stderr to guard the wire.
    WIRE = os.dup(1)
    server.run("stdio")
