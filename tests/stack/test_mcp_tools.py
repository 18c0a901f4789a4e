"""Tools from elsewhere: the reference MCP servers (npm) and a real local HTTP service,
run through the real API, worker and approval worker."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from router.errors import ConfigError
from router.runtime import Runtime
from router.settings import Settings
from router.status import AuditEvent

from ..support import services
from ..support.audit import audit_events
from ..support.handler_server import serving
from ..support.launcher import REPO, free_port
from ..support.services import IN_CI
from ..support.stack import Stack, stack_env
from ..support.waiting import wait_for

MCP_BIN = REPO / "tests" / "mcp_servers" / "node_modules" / ".bin"
CONFIG = REPO / "tests" / "mcp_tools.yaml"
REDIS_DBS = {"sqlite": 10, "postgresql": 10}
SECRET = "s3cret-token"


# Requests to ``/cut``, by call id.
CUT_RUNS: Counter[str] = Counter()


class Service(BaseHTTPRequestHandler):
    """The HTTP tool's other end: echo, plain text, 429 with Retry-After, 500, an answer
    cut short, one that never ends."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/echo":
            self._json(
                200,
                {
                    "got": body,
                    "token": self.headers.get("x-token"),
                    "idempotency_key": self.headers.get("idempotency-key"),
                },
            )
        elif self.path == "/deep-error":
            self._raw(500, b"[" * 100_000 + b"]" * 100_000)
        elif self.path == "/cut":
            CUT_RUNS[self.headers["x-toolrouter-call-id"]] += 1
            self._cut()
        elif self.path == "/endless":
            self._endless()
        elif self.path == "/busy":
            self._json(429, {"error": "slow down"}, {"Retry-After": "3"})
        else:
            self._json(500, {"message": "database on fire"})

    def do_GET(self) -> None:
        payload = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _cut(self) -> None:
        """A 200 that promises more body than it sends, then hangs up."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "1000")
        self.end_headers()
        self.wfile.write(b'{"done": tr')
        self.close_connection = True

    def _endless(self) -> None:
        """A JSON string that never ends, until the client hangs up."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        chunk = b"a" * 65536
        with contextlib.suppress(OSError):
            self.wfile.write(b'"')
            while True:
                self.wfile.write(chunk)

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(body).encode(), headers)

    def _raw(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def http_service() -> Iterator[str]:
    with serving(Service) as port:
        yield f"http://127.0.0.1:{port}"


def need_mcp_servers() -> None:
    if not (MCP_BIN / "mcp-server-everything").exists() or shutil.which("node") is None:
        message = "run `npm ci --prefix tests/mcp_servers` (and have Node.js) for the MCP tests"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def tool_env(http_service: str, fs_root: Path) -> dict[str, str]:
    return {
        "MCP_BIN": str(MCP_BIN),
        "MCP_FS_ROOT": str(fs_root),
        "HTTP_TOOL_URL": http_service,
        "HTTP_TOOL_TOKEN": SECRET,
        "HTTP_DOWN_URL": f"http://127.0.0.1:{free_port()}/nothing",
    }


@pytest.fixture(scope="module")
def mcp_stack(
    redis_base: str,
    http_service: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Stack, Path]]:
    need_mcp_servers()
    state_dir = tmp_path_factory.mktemp("mcp-stack")
    fs_root = tmp_path_factory.mktemp("fs-root")
    (fs_root / "hello.txt").write_text("hello from disk\n")
    databases = services.database_for("sqlite", state_dir, request)
    redis_url = f"{redis_base}/{REDIS_DBS['sqlite']}"
    services.flush(redis_url)
    env = stack_env(
        database_url=next(databases),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_CONFIG=str(CONFIG),
        **tool_env(http_service, fs_root),
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    for name, roles in {
        "agent": ["agent"],
        "approver": ["approver"],
        "operator": ["operator"],
    }.items():
        stack.keys[name] = runtime.keys.create(name, roles)
    runtime.close()
    try:
        stack.start_api()
        stack.start_worker(concurrency=1)
        stack.start_worker(name="approvals", queues="approvals,maintenance", concurrency=1)
        yield stack, fs_root
    finally:
        stack.stop_all()
        services.flush(redis_url)
        databases.close()


def call(stack: Stack, tool: str, args: dict[str, Any], wait_s: float = 30) -> dict[str, Any]:
    with stack.client("agent") as http:
        return http.post(
            "/v1/calls",
            json={
                "tool": tool,
                "args": args,  # type: ignore[no-any-return]
                "wait_s": wait_s,
            },
        ).json()


def test_a_read_only_mcp_tool_runs_ungated(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    assert call(stack, "everything.echo", {"message": "hi"})["value"] == "Echo: hi"
    result = call(stack, "files.read_text_file", {"path": str(mcp_stack[1] / "hello.txt")})
    assert result["value"] == {"content": "hello from disk\n"}


def test_imported_tools_carry_their_schema_and_risk(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    with stack.client("agent") as http:
        tools = {tool["name"]: tool for tool in http.get("/v1/tools").json()["tools"]}
    assert tools["files.read_text_file"]["risk"] == "low"
    assert tools["files.write_file"]["risk"] == "high"
    assert tools["files.write_file"]["requires_approval"] is True
    assert "path" in tools["files.write_file"]["input_schema"]["properties"]
    # The config overrides the import: get-env is read-only, but gated here.
    assert tools["everything.get-env"]["requires_approval"] is True
    assert tools["everything.echo"]["handler_kind"] == "mcp"


def test_a_destructive_mcp_tool_waits_for_approval_then_acts(mcp_stack: tuple[Stack, Path]) -> None:
    stack, fs_root = mcp_stack
    target = fs_root / "written.txt"
    pending = call(stack, "files.write_file", {"path": str(target), "content": "approved"}, 0)
    assert pending["status"] == "pending"
    assert not target.exists()
    with stack.client("approver") as http:
        outcome = http.post(
            f"/v1/approvals/{pending['request_id']}/approve", json={"wait_s": 30}
        ).json()
    assert outcome["status"] == "succeeded", outcome
    assert target.read_text() == "approved"


def test_an_mcp_error_result_is_an_error_value(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    result = call(stack, "files.read_text_file", {"path": "/etc/passwd"})
    assert result["ok"] is False and result["status"] == "failed"
    assert result["error_type"] == "McpToolError"
    assert "outside allowed directories" in result["error"]


def test_mcp_sessions_are_reused_not_spawned_per_call(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    worker = psutil.Process(stack.processes["worker"].pid)

    def servers() -> int:
        return sum(
            "mcp-server-everything" in " ".join(p.cmdline())
            for p in worker.children(recursive=True)
        )

    call(stack, "everything.echo", {"message": "warm"})
    before = servers()
    for i in range(5):
        assert call(stack, "everything.echo", {"message": str(i)})["ok"]
    assert servers() == before >= 1


def test_an_http_tool_sends_json_and_returns_the_json_answer(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    result = call(stack, "http_echo", {"n": 1})
    assert result["ok"] is True
    assert result["value"]["got"] == {"n": 1}
    # The service echoes the header's secret: it was sent, and the agent reads its name.
    assert result["value"]["token"] == "${HTTP_TOOL_TOKEN}"
    assert result["value"]["idempotency_key"] == result["call_id"]
    assert call(stack, "http_text", {"q": "x"})["value"] == "hello /text?q=x"


def test_an_http_tools_arguments_never_replace_what_its_url_fixes(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    answered = call(stack, "http_fixed", {"account": "theirs", "q": "x"})
    assert answered["value"] == "hello /text?account=ours&q=x", answered


def test_an_idempotency_key_in_any_script_reaches_an_http_tool(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    with stack.client("agent") as http:
        result = http.post(
            "/v1/calls",
            json={"tool": "http_echo", "args": {}, "idempotency_key": "ключ 1", "wait_s": 30},
        ).json()
    assert result["status"] == "succeeded", result
    assert result["value"]["idempotency_key"] == "%D0%BA%D0%BB%D1%8E%D1%87 1"


@pytest.mark.parametrize(
    ("tool", "error", "error_type"),
    [
        ("http_busy", "HTTP 429: slow down", "HTTPError"),
        ("http_broken", "HTTP 500: database on fire", "HTTPError"),
        ("http_deep_error", f"HTTP 500: {'[' * 500}", "HTTPError"),
        ("http_down", None, "ConnectError"),
    ],
)
def test_http_failures_carry_the_remote_message(
    mcp_stack: tuple[Stack, Path], tool: str, error: str | None, error_type: str
) -> None:
    stack, _ = mcp_stack
    result = call(stack, tool, {})
    assert (result["status"], result["error_type"]) == ("failed", error_type)
    if error is not None:
        assert result["error"] == error


def test_an_http_service_that_cannot_be_reached_is_named_in_the_error(
    mcp_stack: tuple[Stack, Path],
) -> None:
    """ "Connection refused" alone does not say which of an agent's services was down."""
    stack, _ = mcp_stack
    down = httpx.URL(stack.env["HTTP_DOWN_URL"])
    result = call(stack, "http_down", {})
    assert result["error"].startswith(f"127.0.0.1:{down.port}: "), result
    assert "refused" in result["error"].lower(), result


def test_an_http_answer_past_the_result_limit_fails_the_call_and_the_worker_serves_on(
    mcp_stack: tuple[Stack, Path],
) -> None:
    stack, _ = mcp_stack
    started = time.monotonic()

    endless = call(stack, "http_endless", {})

    assert endless == {
        "ok": False,
        "call_id": endless["call_id"],
        "tool": "http_endless",
        "status": "failed",
        "error": f"result too large: over the limit of {16 * 1024 * 1024} bytes",
        "error_type": "ResultTooLarge",
    }
    # Cut off at the limit, not read on until the tool's 20 s timeout.
    assert time.monotonic() - started < 15
    assert call(stack, "http_echo", {"n": 1})["status"] == "succeeded"


def retries(stack: Stack, call_id: str) -> int:
    return [event for event, _ in audit_events(stack, call_id)].count(AuditEvent.RETRY)


@pytest.mark.parametrize(
    ("tool", "runs"), [("http_cut", 1), ("http_cut_idempotent", 3)], ids=["once", "idempotent"]
)
def test_an_http_answer_cut_short_is_sent_again_only_for_an_idempotent_tool(
    mcp_stack: tuple[Stack, Path], tool: str, runs: int
) -> None:
    stack, _ = mcp_stack

    result = call(stack, tool, {})

    assert (result["status"], result["error_type"]) == ("failed", "RemoteProtocolError")
    # The service took every request it was sent: each one may have acted.
    assert CUT_RUNS[result["call_id"]] == runs
    assert retries(stack, result["call_id"]) == runs - 1


@pytest.mark.parametrize(
    ("server", "cause"),
    [
        ("{command: /nonexistent/mcp-server}", "command not found: /nonexistent/mcp-server"),
        (
            """{command: sh, args: ["-c", "echo 'npm error 404 Not Found' >&2; exit 3"]}""",
            "the server exited with code 3 before answering; "
            "its stderr ended: npm error 404 Not Found",
        ),
    ],
    ids=["command-not-found", "exits-at-once"],
)
def test_an_mcp_server_that_cannot_start_is_a_config_error_naming_the_cause(
    tmp_path: Path, server: str, cause: str
) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(f"mcp_servers:\n  ghost: {server}\n")
    runtime = Runtime(Settings(state_dir=tmp_path, config=config))
    try:
        with pytest.raises(ConfigError) as refused:
            runtime.prepare()
    finally:
        runtime.close()
    # Where a start wrote to its stderr, the error names the log holding all of it.
    log = f" (all of it in {tmp_path / 'logs' / 'mcp-ghost.log'})" if "stderr" in cause else ""
    assert str(refused.value) == (
        f"config error (file {config}): mcp server 'ghost' cannot be reached: {cause}{log}"
    )
    assert "ExceptionGroup" not in str(refused.value)


def test_a_claude_desktop_json_file_is_a_config(tmp_path: Path) -> None:
    need_mcp_servers()
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "everything": {
                        "command": str(MCP_BIN / "mcp-server-everything"),
                        "args": ["stdio"],
                    }
                },
                # The app's own settings, which toolrouter leaves alone.
                "globalShortcut": "Ctrl+Space",
            }
        )
    )
    runtime = Runtime(Settings(state_dir=tmp_path, config=config))
    try:
        runtime.prepare()
        assert runtime.registry.get("everything.get-sum") is not None
    finally:
        runtime.close()


def toolrouter_tools(
    config: Path, state_dir: Path, *, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``toolrouter tools`` with ``config``, started in ``cwd``, stdin closed."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLROUTER_")}
    env.update(
        TOOLROUTER_CONFIG=str(config),
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_SECRETS_DIR=os.environ["TOOLROUTER_SECRETS_DIR"],
        PYTHONPATH=str(REPO),
    )
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", "tools"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


TINY_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("tiny")


@server.tool()
def hello() -> str:
    return "hello"


server.run("stdio")
"""


@pytest.mark.parametrize("cwd", [None, "servers"])
def test_a_servers_relative_paths_are_read_from_the_configs_folder(
    tmp_path: Path, cwd: str | None
) -> None:
    # An MCP client starts `toolrouter mcp` in a folder of its own: read from the process's
    # folder, a relative path would make the whole config unreadable there.
    folder = tmp_path / "config"
    (folder / "servers").mkdir(parents=True)
    (folder / (cwd or ".") / "tiny.py").write_text(TINY_SERVER, encoding="utf-8")
    config = folder / "toolrouter.yaml"
    server = {"command": sys.executable, "args": ["tiny.py"], **({"cwd": cwd} if cwd else {})}
    config.write_text(json.dumps({"mcp_servers": {"tiny": server}, "tools": []}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = toolrouter_tools(config, tmp_path / "state", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    assert "tiny.hello" in listed.stdout


def test_an_imported_servers_stderr_goes_to_its_log_not_into_command_output(
    tmp_path: Path,
) -> None:
    need_mcp_servers()
    config = tmp_path / "toolrouter.yaml"
    config.write_text(
        "mcp_servers:\n"
        f"  everything: {{command: {MCP_BIN / 'mcp-server-everything'}, args: [stdio]}}\n"
        "tools: []\n",
        encoding="utf-8",
    )
    listed = toolrouter_tools(config, tmp_path / "state", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "everything.echo" in listed.stdout
    assert listed.stderr == ""
    assert all(line.startswith("everything.") for line in listed.stdout.splitlines())
    # What the server wrote to its stderr is kept, beside the processes' logs.
    kept = (tmp_path / "state" / "logs" / "mcp-everything.log").read_text(encoding="utf-8")
    assert kept.strip(), "the server's stderr went nowhere"


def test_a_dropped_mcp_session_is_opened_again(mcp_stack: tuple[Stack, Path]) -> None:
    stack, _ = mcp_stack
    assert call(stack, "everything.echo", {"message": "before"})["ok"]
    worker = psutil.Process(stack.processes["worker"].pid)
    servers = [
        p
        for p in worker.children(recursive=True)
        if "mcp-server-everything" in " ".join(p.cmdline())
    ]
    assert servers
    for server in servers:
        server.kill()
    psutil.wait_procs(servers, timeout=10)
    # The call that finds the session gone may fail (retryably); the next one reconnects.
    outcomes = [call(stack, "everything.echo", {"message": f"after {i}"}) for i in range(2)]
    assert outcomes[-1].get("value") == "Echo: after 1", outcomes
    if not outcomes[0]["ok"]:
        assert outcomes[0]["error_type"] == "ConnectionError"


def test_only_the_tool_workers_keep_the_mcp_servers_running(
    mcp_stack: tuple[Stack, Path],
) -> None:
    # The API and the approval worker read the imported tools' specs and run none of them.
    stack, _ = mcp_stack
    # Its pool process has built the registry ("pool process N ready: M tools").
    stack.launcher.wait_for_log("approvals", "ready: ")

    def servers_under(name: str) -> set[str]:
        under = psutil.Process(stack.processes[name].pid).children(recursive=True)
        return {
            server
            for process in under
            for server in ("mcp-server-everything", "mcp-server-filesystem")
            if server in " ".join(_cmdline(process))
        }

    wait_for(
        lambda: servers_under("api") == servers_under("approvals") == set(),
        60,
        "the API and the approval worker to stop the servers they listed",
    )
    both = {"mcp-server-everything", "mcp-server-filesystem"}
    wait_for(lambda: servers_under("worker") == both, 60, "the tool worker's servers")
    assert call(stack, "everything.echo", {"message": "still"})["value"] == "Echo: still"


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone since it was listed
        return []
