"""``${VAR}`` secrets in the tool config, attacked from outside against real processes on
both databases: refused at load when they cannot go in a header, and never in an error, an
audit row, Redis or a log when a call through them fails. The private stacks of this module
also serve a tool that answers nested past the limit.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import func
from sqlalchemy import select as sql_select

from router.db.schema import audit_log, calls
from router.errors import ConfigError
from router.tools.config import load_config
from router.tools.registry import ToolRegistry

from ..conftest import BACKENDS
from ..support import services
from ..support.handler_server import serving
from ..support.launcher import free_port
from ..support.stack import Stack, stack_env
from ..support.trust import (
    LIMIT,
    TOO_DEEP,
    TRUST_REDIS_DB,
    depth_of,
    finished,
    runtime_of,
)

# == private stacks: a config with secrets and a tool that answers too deeply ===============

# A secret that is a number: answered outside any string, it cannot be named in place.
PIN = "20261207"


class ChattyHook(BaseHTTPRequestHandler):
    """An endpoint that says no, repeating what it was sent (as many real services do)."""

    # The request lines of ``/keyed``, as they arrived.
    keyed_paths: list[str] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._refuse(f"no hook at {self.path} for {self.headers.get('Authorization')}")

    def do_GET(self) -> None:
        if self.path == "/echo":
            # A service that succeeds, answering with the headers it was sent.
            body = json.dumps({"authorization": self.headers.get("Authorization")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/keyed"):
            self.keyed_paths.append(self.path)
            self._refuse(f"no such account; request was GET {self.path}")
            return
        # What it was asked (the caller's query) before the key it was sent.
        query = urllib.parse.unquote(urllib.parse.urlsplit(self.path).query)
        self._refuse(f"asked {query} by {self.headers.get('Authorization')}")

    def _refuse(self, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class SecretStack:
    stack: Stack
    backend: str
    secret: str
    query_key: str
    closed_port: int
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, who: str = "agent") -> httpx.Client:
        return httpx.Client(
            base_url=self.stack.base_url,
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
            timeout=60,
        )


SECRET_CONFIG = """\
tools:
  - {{name: echo, handler: "tests.fixture_tools:echo", risk: low}}
  - {{name: deep, handler: "tests.fixture_tools:deep", risk: low}}
  - name: hook_closed
    risk: low
    timeout_s: 10
    handler:
      http:
        url: "http://127.0.0.1:{closed}/hook/${{TR_TEST_TOKEN}}"
        headers: {{Authorization: "Bearer ${{TR_TEST_TOKEN}}"}}
  - name: hook_chatty
    risk: low
    timeout_s: 10
    handler:
      http:
        url: "http://127.0.0.1:{chatty}/hook/${{TR_TEST_TOKEN}}"
        headers: {{Authorization: "Bearer ${{TR_TEST_TOKEN}}"}}
  - name: hook_query
    risk: low
    timeout_s: 10
    handler:
      http:
        url: "http://127.0.0.1:{chatty}/query"
        method: GET
        headers: {{Authorization: "Bearer ${{TR_TEST_TOKEN}}"}}
  - name: hook_echo
    risk: low
    timeout_s: 10
    handler:
      http:
        url: "http://127.0.0.1:{chatty}/echo"
        method: GET
        headers: {{Authorization: "Bearer ${{TR_TEST_TOKEN}}"}}
  - {{name: ledger_fallback, handler: "tests.fixture_tools:ledger", risk: low}}
  - {{name: echo_then_ledger, handler: "tests.fixture_tools:echo", risk: low,
     fallbacks: [ledger_fallback]}}
  - name: pin_holder
    risk: low
    handler:
      http:
        url: "http://127.0.0.1:{closed}/pin"
        headers: {{X-Pin: "${{TR_TEST_PIN}}"}}
  - name: hook_keyed
    risk: low
    timeout_s: 10
    handler:
      http:
        url: "http://127.0.0.1:{chatty}/keyed?key=${{TR_TEST_QUERY_KEY}}"
        method: GET
"""


@pytest.fixture(scope="module")
def chatty_port() -> Iterator[int]:
    with serving(ChattyHook) as port:
        yield port


@pytest.fixture(scope="module", params=BACKENDS)
def secret_stack(
    request: pytest.FixtureRequest,
    redis_base: str,
    chatty_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SecretStack]:
    """An API and a worker of their own whose config holds a ``${TR_TEST_TOKEN}`` secret
    in an HTTP tool's url and header, a ``${TR_TEST_QUERY_KEY}`` in another's query, and a
    tool that answers as deeply as it is asked."""
    backend = request.param
    state_dir = tmp_path_factory.mktemp(f"trust-{backend}")
    databases = services.database_for(backend, state_dir, request)
    database_url = next(databases)
    redis_url = f"{redis_base}/{TRUST_REDIS_DB}"
    services.flush(redis_url)
    closed = free_port()  # nothing listens here
    config = state_dir / "tools.yaml"
    config.write_text(SECRET_CONFIG.format(closed=closed, chatty=chatty_port), encoding="utf-8")
    secret = f"trs-{uuid.uuid4().hex}"
    # What URLs encode: sent in a query, it goes out as something other than itself.
    query_key = f"sk+Live/{uuid.uuid4().hex[:12]}=="
    private = SecretStack(
        Stack(
            env=stack_env(
                database_url=database_url,
                redis_url=redis_url,
                state_dir=state_dir,
                TOOLROUTER_CONFIG=str(config),
                TR_TEST_TOKEN=secret,
                TR_TEST_QUERY_KEY=query_key,
                TR_TEST_PIN=PIN,
            ),
            state_dir=state_dir,
        ),
        backend,
        secret,
        query_key,
        closed,
    )
    with runtime_of(private.stack.settings) as runtime:
        for who in ("agent", "operator"):
            private.tokens[who] = runtime.keys.create(who, [who])
    try:
        private.stack.start_api()
        private.stack.start_worker(queues="tools.low", concurrency=1)
        yield private
    finally:
        private.stack.stop_all()
        services.flush(redis_url)
        databases.close()


def test_a_result_nested_past_the_limit_fails_the_call_as_result_too_deep(
    secret_stack: SecretStack,
) -> None:
    outcomes: dict[int, dict[str, Any]] = {}
    with secret_stack.client() as http:
        for depth in (LIMIT, LIMIT + 1, 10_000, 200_000):
            accepted = http.post("/v1/calls", json={"tool": "deep", "args": {"depth": depth}})
            assert accepted.status_code == 200, accepted.text[:300]
            outcomes[depth] = finished(http, accepted.json()["call_id"])
        after = http.post("/v1/calls", json={"tool": "echo", "args": {"n": 1}, "wait_s": 30})
    assert outcomes[LIMIT]["status"] == "succeeded"
    assert depth_of(outcomes[LIMIT]["value"]) == LIMIT
    for depth in (LIMIT + 1, 10_000, 200_000):
        body = outcomes[depth]
        assert body["status"] == "failed", body
        assert body["error_type"] == "ResultTooDeep"
        assert body["error"] == f"result {TOO_DEEP}"
    assert after.json()["status"] == "succeeded"
    with runtime_of(secret_stack.stack.settings) as runtime, runtime.store.reading() as conn:
        running = conn.execute(
            sql_select(func.count()).select_from(calls).where(calls.c.status == "running")
        ).scalar_one()
    assert running == 0
    print(
        f"[{secret_stack.backend}] deep results: {LIMIT} -> {outcomes[LIMIT]['status']}, "
        + ", ".join(
            f"{depth:,} -> {outcomes[depth]['status']} {outcomes[depth]['error_type']}"
            for depth in (LIMIT + 1, 10_000, 200_000)
        )
        + f"; none left running; the worker's next call -> {after.json()['status']}"
    )


# == secrets from ${VAR} ====================================================================

HEADER_TOOL = """\
tools:
  - name: hook
    handler:
      http:
        url: "https://hooks.example/in"
        headers: {Authorization: "Bearer ${TR_TEST_TOKEN}"}
"""
FTP_TOOL = """\
tools:
  - name: hook
    handler:
      http:
        url: "ftp://user:${TR_TEST_TOKEN}@host/"
"""
MCP_SERVER_HEADER = """\
mcp_servers:
  remote:
    url: "https://mcp.example/mcp"
    headers: {Authorization: "Bearer ${TR_TEST_TOKEN}"}
tools: []
"""
SECRET_CASES = {
    "header, trailing newline": (HEADER_TOOL, "s3cr3t-{hex}\n", "contains a line break"),
    "header, CR LF inside": (HEADER_TOOL, "s3cr3t-{hex}\r\nX-Evil: 1", "contains a line break"),
    "header, not ASCII": (HEADER_TOOL, "s3cr3t-\u00e9\u00f1-{hex}", "is not ASCII"),
    "url with a non-http scheme": (FTP_TOOL, "s3cr3t-{hex}", "url must be http(s)"),
    "mcp server header, newline": (MCP_SERVER_HEADER, "s3cr3t-{hex}\n", "contains a line break"),
}


def config_error_of(path: Path, env: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        ToolRegistry.from_config(load_config(path, env=env), file=str(path))
    return caught.value


@pytest.mark.parametrize("case", list(SECRET_CASES))
def test_a_secret_that_cannot_be_used_stops_the_load_naming_only_its_variable(
    case: str, tmp_path: Path
) -> None:
    text, template, reason = SECRET_CASES[case]
    value = template.format(hex=uuid.uuid4().hex[:12])
    path = tmp_path / "toolrouter.yaml"
    path.write_text(text, encoding="utf-8")
    error = str(config_error_of(path, {"TR_TEST_TOKEN": value}))
    assert "${TR_TEST_TOKEN}" in error and reason in error, error
    assert value not in error and value.strip() not in error, error
    # The same config through the command an operator runs, the secret in its environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLROUTER_")}
    env.update(
        TOOLROUTER_STATE_DIR=str(tmp_path / "state"),
        TOOLROUTER_SECRETS_DIR=os.environ["TOOLROUTER_SECRETS_DIR"],
        TOOLROUTER_CONFIG=str(path),
        TR_TEST_TOKEN=value,
        PYTHONUNBUFFERED="1",
    )
    result = subprocess.run(
        [sys.executable, "-m", "router.cli.main", "tools"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "${TR_TEST_TOKEN}" in result.stderr and "Traceback" not in output, output
    assert value not in output and value.strip() not in output, output
    print(f"config {case}: refused at load, exit {result.returncode}: {result.stderr.strip()!r}")


def as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def base64_forms(secret: str) -> list[bytes]:
    """What any base64 text carrying ``secret`` holds, at each of the three alignments
    (Celery's messages travel base64-encoded)."""
    raw = secret.encode()
    forms = []
    for start in range(3):
        core = raw[start:]
        forms.append(base64.b64encode(core[: len(core) - len(core) % 3]))
    return forms


def scan_redis(url: str, secret: str) -> tuple[int, list[str]]:
    """Keys scanned, and those whose name or value holds ``secret``, as is or in base64."""
    needles = [secret.encode(), *base64_forms(secret)]
    client: redis.Redis = redis.Redis.from_url(url)
    found: list[str] = []
    scanned = 0
    try:
        for key in client.scan_iter(count=1000):
            scanned += 1
            kind = as_bytes(client.type(key)).decode()
            if kind == "string":
                values: list[Any] = [client.get(key)]
            elif kind == "list":
                values = client.lrange(key, 0, -1)
            elif kind == "hash":
                values = [*client.hgetall(key).keys(), *client.hgetall(key).values()]
            elif kind == "set":
                values = list(client.smembers(key))
            elif kind == "zset":
                values = client.zrange(key, 0, -1)
            else:
                values = []
            texts = [key, *values]
            if any(needle in as_bytes(v) for v in texts for needle in needles):
                found.append(as_bytes(key).decode(errors="replace"))
    finally:
        client.close()
    return scanned, found


def test_a_failing_http_tool_never_reveals_its_secret(secret_stack: SecretStack) -> None:
    secret, stack = secret_stack.secret, secret_stack.stack
    results = {}
    with secret_stack.client() as http:
        for tool in ("hook_closed", "hook_chatty"):
            accepted = http.post("/v1/calls", json={"tool": tool, "args": {"note": "x"}})
            assert accepted.status_code == 200, accepted.text[:300]
            results[tool] = finished(http, accepted.json()["call_id"])
        described = http.get("/v1/tools").text + http.get("/v1/tools/hook_chatty").text
    with secret_stack.client("operator") as http:
        audit_text = http.get("/v1/audit", params={"limit": 1000}).text
    closed, chatty = results["hook_closed"], results["hook_chatty"]
    assert closed["status"] == "failed" and closed["error_type"] == "ConnectError", closed
    assert chatty["status"] == "failed" and chatty["error_type"] == "HTTPError", chatty
    # Where the service repeated the secret back, the name of its variable stands instead.
    assert chatty["error"] == (
        "HTTP 404: no hook at /hook/${TR_TEST_TOKEN} for Bearer ${TR_TEST_TOKEN}"
    ), chatty["error"]
    assert secret not in json.dumps(results) and secret not in described
    assert secret not in audit_text and "${TR_TEST_TOKEN}" in audit_text
    # Every stored row, every log line, everything in Redis.
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        stored = [str(tuple(row)) for row in conn.execute(sql_select(calls)).all()]
        audited = [str(tuple(row)) for row in conn.execute(sql_select(audit_log)).all()]
    assert not [row for row in stored + audited if secret in row]
    assert any("${TR_TEST_TOKEN}" in row for row in audited)
    logs = {name: stack.log(name) for name in ("api", "worker")}
    assert all(logs.values()), "both processes log"
    leaking_logs = [name for name, text in logs.items() if secret in text]
    assert leaking_logs == [], leaking_logs
    scanned, in_redis = scan_redis(stack.env["TOOLROUTER_REDIS_URL"], secret)
    assert in_redis == [], in_redis
    print(
        f"[{secret_stack.backend}] secret in url+header: closed port -> {closed['status']} "
        f"{closed['error_type']} {closed['error']!r}; echoing service -> {chatty['error']!r}; "
        f"secret found in {len(stored)} call rows / {len(audited)} audit rows / "
        f"{sum(len(t) for t in logs.values())} log bytes / {scanned} Redis keys: 0"
    )


def test_a_service_that_answers_with_the_secret_it_was_sent_never_reveals_it(
    secret_stack: SecretStack,
) -> None:
    """A success value is the service's words too: the secret echoed in it is named."""
    secret = secret_stack.secret
    with secret_stack.client() as http:
        accepted = http.post("/v1/calls", json={"tool": "hook_echo", "args": {}})
        assert accepted.status_code == 200, accepted.text[:300]
        result = finished(http, accepted.json()["call_id"])
    assert result["status"] == "succeeded", result
    assert result["value"] == {"authorization": "Bearer ${TR_TEST_TOKEN}"}
    with runtime_of(secret_stack.stack.settings) as runtime, runtime.store.reading() as conn:
        stored = [str(tuple(row)) for row in conn.execute(sql_select(calls)).all()]
    assert not [row for row in stored if secret in row]


def test_a_secret_answered_as_a_number_fails_the_call_and_nothing_runs_again(
    secret_stack: SecretStack, tmp_path: Path
) -> None:
    """The handler ran: its answer is not told (the secret would be), and no fallback runs
    the arguments again, since the handler's action may not bear repeating."""
    runs = tmp_path / "runs"
    args = {"pin": int(PIN), "path": str(runs)}
    with secret_stack.client() as http:
        accepted = http.post("/v1/calls", json={"tool": "echo_then_ledger", "args": args})
        assert accepted.status_code == 200, accepted.text[:300]
        result = finished(http, accepted.json()["call_id"])
    assert result["status"] == "failed" and result["error_type"] == "SecretInResult", result
    assert PIN not in json.dumps(result)
    assert not runs.exists()


def test_a_secret_across_the_error_texts_cut_is_replaced_whole(secret_stack: SecretStack) -> None:
    """The remote's error text is cut to 500 characters. A caller padding its own query can
    put the cut inside the secret the service repeats; what is left of it must not show."""
    secret = secret_stack.secret
    # "asked note=<pad> by Bearer <secret>": the cut falls half way into the secret.
    pad = 500 - len("asked note=") - len(" by Bearer ") - len(secret) // 2
    with secret_stack.client() as http:
        accepted = http.post("/v1/calls", json={"tool": "hook_query", "args": {"note": "a" * pad}})
        assert accepted.status_code == 200, accepted.text[:300]
        result = finished(http, accepted.json()["call_id"])
    assert result["status"] == "failed" and result["error_type"] == "HTTPError", result
    assert secret[: len(secret) // 2] not in result["error"]
    assert result["error"].endswith(" by Bearer ${TR_TEST_TOKEN}"), result["error"][-80:]


def test_a_secret_in_a_get_tools_query_is_hidden_in_the_form_it_was_sent(
    secret_stack: SecretStack,
) -> None:
    """A key with ``+``, ``/`` and ``=`` in the url's query goes out percent-encoded. In
    that form too it shows in no answer, audit row or log, though the service repeats the
    request line it was sent."""
    key, stack = secret_stack.query_key, secret_stack.stack
    ChattyHook.keyed_paths.clear()
    with secret_stack.client() as http:
        accepted = http.post("/v1/calls", json={"tool": "hook_keyed", "args": {"note": "x"}})
        assert accepted.status_code == 200, accepted.text[:300]
        result = finished(http, accepted.json()["call_id"])
        described = http.get("/v1/tools/hook_keyed").text
    with secret_stack.client("operator") as http:
        audit_text = http.get("/v1/audit", params={"limit": 1000}).text
    [path] = ChattyHook.keyed_paths
    sent = urllib.parse.urlsplit(path).query.split("&")[0].removeprefix("key=")
    # Else the key went out as written and this test would show nothing new.
    assert sent != key, path
    forms = {key, sent, urllib.parse.unquote_plus(sent)}
    assert result["status"] == "failed" and result["error_type"] == "HTTPError", result
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        rows = [str(tuple(row)) for row in conn.execute(sql_select(calls)).all()]
        rows += [str(tuple(row)) for row in conn.execute(sql_select(audit_log)).all()]
    places = {
        "answer": json.dumps(result),
        "tool": described,
        "audit": audit_text,
        "rows": "\n".join(rows),
        **{f"{name} log": stack.log(name) for name in ("api", "worker")},
    }
    leaks = sorted(
        f"{form!r} in {place}" for place, text in places.items() for form in forms if form in text
    )
    assert leaks == [], leaks
    assert result["error"] == (
        "HTTP 404: no such account; request was GET /keyed?key=${TR_TEST_QUERY_KEY}&note=x"
    ), result["error"]
    # Nor does the worker write httpx's line per request, whatever form its URL takes.
    assert "HTTP Request:" not in places["worker log"]
    print(
        f"[{secret_stack.backend}] key {key!r} in a GET url went out as {sent!r}; "
        f"the service's echo became {result['error']!r}; found in the answer, audit, "
        f"{len(rows)} rows and the logs: 0"
    )
