"""A stdio MCP server's stderr in ``mcp-<server>.log``: every character that does not print
written as its escape, as in the processes' logs, and no more of it than a limit per start;
the tail of a failed start still names the cause."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from router.tools import mcp_stderr
from router.tools.mcp_client import McpConnections, StdioServer
from router.trust.redaction import Redactor

# Answers initialize, lists one tool, and writes ``lines`` lines of stderr (an escape that
# would retitle a terminal, then filler) before each answer to a call.
SERVER = r"""
import json, sys
lines = int(sys.argv[1])
for raw in sys.stdin:
    message = json.loads(raw)
    if "id" not in message:
        continue
    method, result = message["method"], {}
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "flood", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        for _ in range(lines):
            sys.stderr.write("\x1b]0;pwned\x07" + "E" * 1000 + "\n")
        sys.stderr.flush()
        result = {"content": [{"type": "text", "text": "done"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"""
LIMIT = 64 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_stderr, "MAX_WRITTEN_BYTES", LIMIT)


@pytest.fixture
def connections(tmp_path: Path) -> Iterator[McpConnections]:
    server = StdioServer(command=sys.executable, args=("-c", SERVER, "1000"))
    connections = McpConnections({"sio": server}, log_dir=tmp_path)
    try:
        yield connections
    finally:
        connections.close()


def test_a_servers_stderr_is_logged_escaped_and_no_further_than_the_limit(
    small_limit: None, connections: McpConnections, tmp_path: Path
) -> None:
    for _ in range(2):
        # The second answer comes too: the server never blocks on its stderr.
        result = connections.call_tool("sio", "flood", {}, timeout=20)
        assert result.content[0].text == "done"
    connections.close()

    log = (tmp_path / "mcp-sio.log").read_bytes()
    assert b"\x1b" not in log and b"\x07" not in log
    assert log.startswith(b"\\x1b]0;pwned\\x07EEE")
    dropped = mcp_stderr.DROPPED.format(limit=LIMIT).encode()
    # Lines up to the limit (one line short of it), then one line saying the rest is not.
    assert LIMIT - 2048 < len(log) <= LIMIT + len(dropped) + 1
    assert log.endswith(b"\n" + dropped + b"\n")
    assert log.count(dropped) == 1


def test_a_log_past_the_limit_is_moved_aside_when_its_server_starts(
    small_limit: None, connections: McpConnections, tmp_path: Path
) -> None:
    older = b"x" * (LIMIT + 1)
    (tmp_path / "mcp-sio.log").write_bytes(older)

    assert connections.call_tool("sio", "flood", {}, timeout=20).content[0].text == "done"
    connections.close()

    assert (tmp_path / "mcp-sio.log.1").read_bytes() == older
    assert (tmp_path / "mcp-sio.log").read_bytes().startswith(b"\\x1b]0;pwned")


def test_a_failed_starts_tail_names_the_cause_escaped(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('npm error \\x1b[2J404\\n'); sys.exit(3)"
    server = StdioServer(command=sys.executable, args=("-c", script))
    connections = McpConnections({"ghost": server}, log_dir=tmp_path)
    try:
        with pytest.raises(Exception) as raised:
            connections.list_tools("ghost")
        why = connections.why_unreachable("ghost", raised.value)
    finally:
        connections.close()

    # Where all of it is: a wrapper (npx) may write notices of its own after the cause.
    assert why == (
        "the server exited with code 3 before answering; its stderr ended: npm error \\x1b[2J404"
        f" (all of it in {tmp_path / 'mcp-ghost.log'})"
    )


def test_without_a_log_folder_the_stderr_reaches_this_processs_escaped(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Connections made without a log folder (the commands always give one) hand the
    server's stderr to this process's, a terminal as likely as not: it must not act on it."""
    server = StdioServer(command=sys.executable, args=("-c", SERVER, "3"))
    connections = McpConnections({"sio": server})
    try:
        assert connections.call_tool("sio", "flood", {}, timeout=20).content[0].text == "done"
    finally:
        connections.close()

    err = capfd.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.count("\\x1b]0;pwned\\x07EEE") == 3


def test_a_log_that_cannot_be_written_still_drains_the_servers_stderr() -> None:
    """A full disk (``/dev/full`` fails every write) ends the copy's writing, not its
    reading: a server writing far past a pipe's buffer neither blocks nor breaks."""

    async def flood() -> None:
        async with mcp_stderr.stderr_log(Path("/dev/full")) as pipe:
            for _ in range(2_000):
                pipe.write("E" * 1000 + "\n")
            pipe.flush()

    asyncio.run(flood())


def test_a_config_secret_a_server_writes_to_its_stderr_is_logged_by_name(tmp_path: Path) -> None:
    """A server given ``${VAR}`` secrets in its env may print them (a debug line): its log
    holds the variable's name, as every other log does."""
    secret = "s3cr3t+/Tok&en=Value"
    script = f"import sys; sys.stderr.write('debug: starting with token {secret}\\n'); sys.exit(3)"
    server = StdioServer(command=sys.executable, args=("-c", script))
    connections = McpConnections(
        {"envsrv": server}, log_dir=tmp_path, redact=Redactor({"H_TOKEN": secret})
    )
    try:
        with pytest.raises(Exception) as raised:
            connections.list_tools("envsrv")
        why = connections.why_unreachable("envsrv", raised.value)
    finally:
        connections.close()
    log = (tmp_path / "mcp-envsrv.log").read_text(encoding="utf-8")
    assert log.startswith("debug: starting with token ${H_TOKEN}\n") and secret not in log
    assert secret not in why and "${H_TOKEN}" in why


def test_a_secret_across_the_cut_of_a_long_line_is_logged_by_name(tmp_path: Path) -> None:
    """A long line (a server dumping its environment) is copied in pieces: a secret that
    would lie across the cut between two is kept whole in the second."""
    secret = "supersecret-token-123"
    path = tmp_path / "mcp-envsrv.log"

    async def dump() -> None:
        async with mcp_stderr.stderr_log(path, Redactor({"TOK": secret})) as pipe:
            for padding in (mcp_stderr.MAX_LINE_BYTES - 10, 3 * mcp_stderr.MAX_LINE_BYTES - 1):
                pipe.write("x" * padding + secret + " tail\n")
            pipe.write("y" * 10 + secret)  # no line feed before the end
            pipe.flush()

    asyncio.run(dump())
    log = path.read_text(encoding="utf-8")
    assert secret[:8] not in log and secret[-8:] not in log
    assert log.count("${TOK}") == 3
    assert log.replace("\n", "").count("x") == mcp_stderr.MAX_LINE_BYTES * 4 - 11


def test_a_cut_never_falls_inside_a_secret() -> None:
    redact = Redactor({"TOK": "abcdefgh"})
    assert redact.safe_cut("0123456789") == 3  # the last 7 may start one
    assert redact.safe_cut("01abcdefgh23456") == 2  # across the cut: kept whole after it
    assert redact.safe_cut("abcdefgh0123456789") == 11
    assert Redactor().safe_cut("0123") == 4
