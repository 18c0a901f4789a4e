"""MCP servers that fail on cue: the tests' own on the official SDK (it exits mid-call,
stalls past its timeout, answers with what is not JSON-RPC, writes bytes that are not
UTF-8, leaves a process running) and a raw one over HTTP whose answer is larger than any
answer read. Each call still ends with a clear error within its timeout, is run again only
when its tool is idempotent, and leaves the session (or the next one) working."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from router.status import CallStatus

from ..support.handler_server import serving
from ..support.launcher import REPO
from ..support.raw_mcp import Streamed, answer_with, raw_mcp
from ..support.stack import Stack, own_stack
from ..support.waiting import wait_for
from .test_mcp_tools import call, retries

CONFIG = REPO / "tests" / "mcp_failing.yaml"
REDIS_DB = 10
# The answer of ``remote.flood``: past the 64 MiB read of an answer (4 x the default
# result limit), and finite, so that a client without that limit reads it through.
FLOOD_BYTES = 100 * 1024 * 1024


def listed(cursor: str | None) -> dict[str, Any]:
    schema = {"type": "object"}
    return {"tools": [{"name": n, "inputSchema": schema} for n in ("flood", "slow")]}


def answered(message: dict[str, Any]) -> bytes | Streamed:
    """``flood``: an answer larger than any answer read; ``slow``: one after seven seconds."""
    if message["params"]["name"] != "flood":
        time.sleep(7)
        return answer_with(b'{"content": [{"type": "text", "text": "ok"}]}')(message)
    head = b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "'
    head %= json.dumps(message["id"]).encode()
    tail = b'"}]}}'
    chunk = b"a" * (1024 * 1024)
    pieces = [head, *[chunk] * (FLOOD_BYTES // len(chunk)), tail]
    return Streamed(len(head) + FLOOD_BYTES + len(tail), pieces)


@pytest.fixture(scope="module")
def raw_mcp_url() -> Iterator[str]:
    with serving(raw_mcp(listed, answered)) as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def mcp_stack(
    redis_base: str,
    raw_mcp_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Stack, Path]]:
    state_dir = tmp_path_factory.mktemp("mcp-failing")
    with own_stack(
        state_dir,
        f"{redis_base}/{REDIS_DB}",
        request,
        keys={"agent": ["agent"], "operator": ["operator"]},
        TOOLROUTER_CONFIG=str(CONFIG),
        PYTHON=sys.executable,
        REPO=str(REPO),
        MCP_HTTP_URL=raw_mcp_url,
    ) as stack:
        stack.start_api()
        stack.start_worker(concurrency=1)
        yield stack, state_dir


@pytest.mark.parametrize(
    ("tool", "runs"),
    [("media.exit_mid_call", 1), ("exit_mid_call_idempotent", 3)],
    ids=["once", "idempotent"],
)
def test_an_mcp_call_whose_server_dies_is_sent_again_only_for_an_idempotent_tool(
    mcp_stack: tuple[Stack, Path], tmp_path: Path, tool: str, runs: int
) -> None:
    stack, _ = mcp_stack
    ledger = tmp_path / "runs.txt"

    result = call(stack, tool, {"ledger": str(ledger), "run": "ran"})

    assert (result["status"], result["error_type"]) == ("failed", "ConnectionError")
    assert ledger.read_text().splitlines() == ["ran"] * runs
    assert retries(stack, result["call_id"]) == runs - 1


@pytest.mark.parametrize(
    ("tool", "runs", "status"),
    [("media.stall", 1, CallStatus.FAILED), ("stall_idempotent", 3, CallStatus.SUCCEEDED)],
    ids=["once", "idempotent"],
)
def test_an_mcp_call_that_stalls_past_its_timeout_is_sent_again_only_for_an_idempotent_tool(
    mcp_stack: tuple[Stack, Path], tmp_path: Path, tool: str, runs: int, status: CallStatus
) -> None:
    stack, _ = mcp_stack
    ledger = tmp_path / "runs.txt"
    # The session up first (an earlier test may have ended its server): a start that took
    # the first attempt's time would send nothing.
    assert call(stack, "media.beep", {"frames": 8})["ok"]

    result = call(stack, tool, {"ledger": str(ledger), "stalls": 2}, wait_s=45)

    assert result["status"] == status, result
    if status == CallStatus.FAILED:
        assert (result["error"], result["error_type"]) == ("timeout after 2 s", "TimeoutError")
    else:
        assert result["value"] == {"result": "answered run 3"}
    assert ledger.read_text().splitlines() == ["ran"] * runs
    assert retries(stack, result["call_id"]) == runs - 1


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("deep", "recursion limit exceeded"), ("numbers", "number out of range")],
)
def test_an_mcp_answer_that_is_not_json_rpc_fails_the_call_at_once(
    mcp_stack: tuple[Stack, Path], kind: str, reason: str
) -> None:
    stack, _ = mcp_stack
    started = time.monotonic()

    result = call(stack, "media.unreadable_answer", {"kind": kind})

    assert (result["status"], result["error_type"]) == ("failed", "McpProtocolError")
    assert result["error"].startswith(
        "MCP server media sent a message that is not JSON-RPC: Invalid JSON: "
    )
    assert reason in result["error"]
    # Not waited out to the tool's 20 s timeout.
    assert time.monotonic() - started < 15
    assert call(stack, "media.beep", {"frames": 8})["ok"]


def test_an_mcp_answer_over_stdio_past_the_read_limit_fails_the_call_at_once(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    started = time.monotonic()

    result = call(stack, "media.endless_answer", {})

    # Named for its size and not retried, though the tool is idempotent and may retry.
    assert (result["status"], result["error_type"]) == ("failed", "ResultTooLarge"), result
    assert result["error"] == "result too large: over the limit of 16777216 bytes"
    assert retries(stack, result["call_id"]) == 0
    # Not waited out to the tool's 20 s timeout.
    assert time.monotonic() - started < 15
    assert call(stack, "media.beep", {"frames": 8})["ok"]


def test_bytes_that_are_not_utf8_from_an_mcp_server_leave_its_session_working(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    started = time.monotonic()

    results = [call(stack, "media.bad_bytes", {}) for _ in range(2)]

    assert [result.get("value") for result in results] == [{"result": "still here"}] * 2, results
    # Neither waited out the tool's 20 s timeout.
    assert time.monotonic() - started < 15


def test_what_an_mcp_server_left_running_ends_with_it(
    mcp_stack: tuple[Stack, Path], tmp_path: Path
) -> None:
    stack, _ = mcp_stack
    pidfile = tmp_path / "child.pid"
    assert call(stack, "media.spawn_child", {"pidfile": str(pidfile)})["ok"]
    child = psutil.Process(int(pidfile.read_text()))
    server = child.parent()
    assert server is not None and "tests.fixture_mcp_server" in server.cmdline()

    # As when its worker's pool process ends: the server goes, its child with it.
    server.kill()

    wait_for(lambda: not alive(child), timeout=10, what="the end of the server's child")
    outcomes = [call(stack, "media.beep", {"frames": 8}) for _ in range(2)]
    assert outcomes[-1]["ok"], outcomes


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_mcp_answer_over_http_past_the_read_limit_fails_the_call_at_once(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    started = time.monotonic()

    result = call(stack, "remote.flood", {})

    # Cut off once past the limit, and named for its size: the session goes with the answer.
    assert (result["status"], result["error_type"]) == ("failed", "ResultTooLarge"), result
    assert result["error"] == "result too large: over the limit of 16777216 bytes"
    assert time.monotonic() - started < 15
    assert call(stack, "media.beep", {"frames": 8})["ok"]


def test_a_slow_answer_from_an_mcp_server_with_headers_is_waited_for(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack

    result = call(stack, "remote_with_headers.slow", {})

    assert (result["status"], result.get("value")) == ("succeeded", "ok"), result
