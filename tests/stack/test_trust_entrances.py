"""The trust boundaries, attacked from outside against real processes on both databases.

What an attacker or a careless operator would try at each way in:

- arguments (HTTP, batches, MCP) and results nested past the one nesting limit;
- inbox sessions: what the cookie is, what it opens, how it ends, who may sign in from where
  and how often;
- ``${VAR}`` secrets in the tool config: refused at load when they cannot go in a header,
  and never in an error, an audit row, Redis or a log when a call through them fails;
- the modes of the files a deployment keeps, even under a careless umask;
- request bodies declared or streamed past their limit.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import os
import re
import select
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest
import redis
from sqlalchemy import func
from sqlalchemy import select as sql_select

from router.cli import processes
from router.db.schema import audit_log, calls, ui_sessions
from router.errors import ConfigError
from router.messaging.namespace import derive_namespace
from router.runtime import Runtime
from router.settings import Settings
from router.tools.config import load_config
from router.tools.registry import ToolRegistry
from router.trust.keyring import key_file

from ..conftest import BACKENDS
from ..support import services
from ..support.calls import submit_pending
from ..support.launcher import REPO, free_port, stop_group, wait_for_http
from ..support.stack import Stack, stack_env
from .test_mcp_server import mcp_session, run, text_of

T = TypeVar("T")
LIMIT = 64  # TOOLROUTER_MAX_NESTING's default
TOO_DEEP = f"nested deeper than the limit of {LIMIT} levels"
ARGS_TOO_DEEP = f"invalid arguments: arguments {TOO_DEEP}"
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024
# Redis db of this module's private stacks (namespaces keep them apart from the shared ones).
TRUST_REDIS_DB = 15
SESSION_COOKIE = "tr_session"


# -- helpers --------------------------------------------------------------------------------


def backend_of(stack: Stack) -> str:
    return "sqlite" if stack.settings.is_sqlite else "postgresql"


def eventually(probe: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    """The first truthy answer of ``probe`` within ``timeout``; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@contextmanager
def runtime_of(settings: Settings) -> Iterator[Runtime]:
    """An in-process runtime on a stack's database (keys, direct reads); no tools loaded."""
    runtime = Runtime(settings)
    try:
        runtime.prepare(check_tools=False)
        yield runtime
    finally:
        runtime.close()


def new_key(stack: Stack, *roles: str) -> tuple[str, str]:
    """A key of this test's own (name, token), so nothing it does touches other tests' keys."""
    name = f"trust-{roles[0]}-{uuid.uuid4().hex[:10]}"
    with runtime_of(stack.settings) as runtime:
        return name, runtime.keys.create(name, list(roles))


def call_rows_by(stack: Stack, requested_by: str) -> int:
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        return int(
            conn.execute(
                sql_select(func.count())
                .select_from(calls)
                .where(calls.c.requested_by == requested_by)
            ).scalar_one()
        )


def audit_by(stack: Stack, actor: str) -> list[tuple[str, str | None, str | None]]:
    """(event, tool, detail) of every audit row ``actor`` wrote, read from the database."""
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        rows = conn.execute(
            sql_select(audit_log.c.event, audit_log.c.tool, audit_log.c.detail)
            .where(audit_log.c.actor == actor)
            .order_by(audit_log.c.seq)
        ).all()
    return [(row.event, row.tool, row.detail) for row in rows]


def nested_args_json(depth: int) -> str:
    """Arguments ``depth`` levels deep: the arguments object, then ``depth - 1`` arrays."""
    return '{"deep": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def nested_args(depth: int) -> dict[str, Any]:
    """``nested_args_json(depth)`` as a Python value, built without recursion."""
    inner: Any = 1
    for _ in range(depth - 1):
        inner = [inner]
    return {"deep": inner}


def depth_of(value: Any) -> int:
    """Levels of arrays and objects in ``value`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            children = item.values() if isinstance(item, dict) else item
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def post_call(stack: Stack, token: str, content: bytes, timeout: float = 60) -> httpx.Response:
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
    ) as http:
        return http.post("/v1/calls", content=content, headers=JSON)


def finished(http: httpx.Client, call_id: str, timeout: float = 60) -> dict[str, Any]:
    """The call's result once it is no longer queued, pending or running."""

    def probe() -> dict[str, Any] | None:
        body: dict[str, Any] = http.get(f"/v1/calls/{call_id}", params={"wait_s": 10}).json()
        return body if body["status"] not in ("queued", "running", "pending") else None

    return eventually(probe, f"call {call_id} to finish", timeout)


# -- the inbox, as a browser would use it ---------------------------------------------------


def browser_headers(stack: Stack) -> dict[str, str]:
    """What a browser sends with a form posted from the inbox's own page."""
    return {"Origin": stack.base_url, "Sec-Fetch-Site": "same-origin"}


def test_behind_a_trusted_proxy_sign_ins_are_counted_by_the_forwarded_address(
    stack: Stack, tmp_path: Path, redis_base: str
) -> None:
    allowed = stack.settings.ui_login_failures_per_minute
    _, token = new_key(stack, "approver")
    own_redis_url = f"{redis_base}/{TRUST_REDIS_DB}"
    forget_counts(own_redis_url, stack.settings)
    guesser, approver = {"X-Forwarded-For": "10.9.9.9"}, {"X-Forwarded-For": "10.8.8.8"}
    try:
        with second_api(
            stack,
            tmp_path / "api.log",
            TOOLROUTER_REDIS_URL=own_redis_url,
            TOOLROUTER_TRUSTED_PROXIES="127.0.0.1",
        ) as base_url:
            failures = [
                sign_in(base_url, f"trk_guess-{i}", guesser).status_code for i in range(allowed)
            ]
            blocked = sign_in(base_url, token, guesser).status_code
            other_client = sign_in(base_url, token, approver).status_code
    finally:
        forget_counts(own_redis_url, stack.settings)
    assert failures == [401] * allowed
    assert (blocked, other_client) == (429, 303)


def test_an_inbox_reason_is_kept_on_one_line_and_one_no_database_stores_is_refused(
    stack: Stack,
) -> None:
    refused_call = submit_pending(stack, "high_echo", args={"n": 1})
    kept_call = submit_pending(stack, "high_echo", args={"n": 2})
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        assert sign_in_with(http, stack.keys["approver"]).status_code == 303
        form = {"decision": "deny", "csrf": csrf_of(http.get("/ui/"))}
        # A NUL would reach the approval worker, whose write fails on PostgreSQL: the
        # approver would wait for its time-out and be told nothing was applied.
        refused = http.post(
            "/ui/decide",
            data={**form, "request_id": refused_call["request_id"], "reason": "a\x00b"},
        )
        assert refused.status_code == 303
        assert "U+0000 at character 2" in html.unescape(http.get("/ui/").text)
        kept = http.post(
            "/ui/decide",
            data={**form, "request_id": kept_call["request_id"], "reason": " wrong\r\n  payee "},
        )
        assert kept.status_code == 303
    with stack.client("operator") as http:
        untouched, decided = (
            http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
            for call in (refused_call, kept_call)
        )
    assert (untouched["status"], untouched["decisions"]) == ("pending", [])
    assert decided["status"] == "denied", decided
    assert [d["reason"] for d in decided["decisions"]] == ["wrong payee"]


def sign_in_with(http: httpx.Client, token: str) -> httpx.Response:
    return http.post("/ui/login", data={"key": token}, headers={"Origin": str(http.base_url)})


def sign_in(base_url: str, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        return http.post(
            "/ui/login", data={"key": token}, headers={"Origin": base_url, **(headers or {})}
        )


def session_cookie(response: httpx.Response) -> str:
    assert response.status_code == 303, (response.status_code, response.text[:300])
    cookie = response.cookies.get(SESSION_COOKIE)
    assert cookie, response.headers
    return cookie


def inbox_page(base_url: str, cookie: str, path: str = "/ui/") -> httpx.Response:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        return http.get(path, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})


def is_login_page(page: httpx.Response) -> bool:
    return page.status_code == 200 and 'id="key"' in page.text and "signed in as" not in page.text


def is_inbox_of(page: httpx.Response, name: str) -> bool:
    return page.status_code == 200 and f"signed in as <b>{name}</b>" in page.text


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    return match.group(1)


def session_rows(stack: Stack, key_name: str) -> list[Any]:
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        return list(
            conn.execute(sql_select(ui_sessions).where(ui_sessions.c.key_name == key_name)).all()
        )


@contextmanager
def second_api(stack: Stack, log: Path, **env: str) -> Iterator[str]:
    """Another API process on the stack's database and Redis (its own memory: throttle,
    caches); yields its base URL."""
    port = free_port()
    with log.open("wb") as handle:
        api = subprocess.Popen(
            # The command line is the parent's to choose from its settings, as `up` does.
            processes.api_argv(
                stack.settings.model_copy(
                    update={"trusted_proxies": env.get("TOOLROUTER_TRUSTED_PROXIES", "")}
                ),
                port=port,
            ),
            env={**stack.env, **env},
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base_url}/healthz", api, log.read_text(errors="replace"))
        yield base_url
    finally:
        stop_group(api)


# -- raw HTTP, for bodies a client library would not send -----------------------------------


def address(stack: Stack) -> tuple[str, int]:
    host, port = stack.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, headers (lower-case names), body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


def rss(process: psutil.Process) -> int:
    return int(process.memory_info().rss)


# == 1. one nesting limit ===================================================================


def test_arguments_nested_past_the_limit_are_rejected_naming_it(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    answers: dict[int, tuple[int, dict[str, Any]]] = {}
    for depth in (LIMIT + 1, 500, 1_000, 10_000):
        content = f'{{"tool": "echo", "args": {nested_args_json(depth)}}}'.encode()
        response = post_call(stack, token, content)
        assert response.status_code != 500, response.text[:300]
        assert response.headers["content-type"].startswith("application/json")
        answers[depth] = (response.status_code, response.json())
    # Parsed, then rejected by the limit: a rejected call (HTTP 200), naming the limit.
    for depth in (LIMIT + 1, 500):
        status, body = answers[depth]
        assert status == 200, (depth, body)
        assert body == {"ok": False, "tool": "echo", "status": "rejected", "error": ARGS_TOO_DEEP}
    # Deeper than the JSON parser itself descends (Python's recursion limit, 1,000 frames,
    # with the body and its arguments inside it): refused as a malformed body, before any
    # call exists, so not audited.
    for depth in (1_000, 10_000):
        status, body = answers[depth]
        assert (status, body) == (422, {"ok": False, "error": "malformed body: nested too deeply"})
    # Nothing stored; each well-formed attempt audited as invalid, naming the limit.
    assert call_rows_by(stack, name) == 0
    audited = audit_by(stack, name)
    assert [(event, tool) for event, tool, _ in audited] == [("invalid", "echo")] * 2
    assert all(ARGS_TOO_DEEP in (detail or "") for _, _, detail in audited)

    # At the limit exactly: accepted, run, and its value (as deep) comes back.
    at_limit = nested_args_json(LIMIT)
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        accepted = http.post(
            "/v1/calls", content=f'{{"tool": "echo", "args": {at_limit}}}'.encode(), headers=JSON
        ).json()
        assert accepted["status"] in ("queued", "succeeded"), accepted
        done = finished(http, accepted["call_id"])
    assert done["status"] == "succeeded" and depth_of(done["value"]) == LIMIT, done["status"]

    # A gated request at the limit waits in the inbox, and everything that shows it answers.
    with stack.client("agent") as http:
        gated = http.post(
            "/v1/calls",
            content=f'{{"tool": "high_echo", "args": {at_limit}}}'.encode(),
            headers=JSON,
        ).json()
    assert gated["status"] == "pending", gated
    with stack.client("approver") as http:
        listed = http.get("/v1/approvals", params={"limit": 200})
        assert listed.status_code == 200, listed.text[:300]
        assert gated["request_id"] in listed.text
        one = http.get(f"/v1/approvals/{gated['request_id']}")
        assert one.status_code == 200 and depth_of(one.json()["request"]["args"]) == LIMIT
    cookie = session_cookie(sign_in(stack.base_url, stack.keys["approver"]))
    inbox = inbox_page(stack.base_url, cookie)
    assert is_inbox_of(inbox, "approver") and gated["request_id"] in inbox.text
    with stack.client("approver") as http:
        denied = http.post(f"/v1/approvals/{gated['request_id']}/deny", json={"reason": "test"})
    assert denied.status_code == 200, denied.text
    print(
        f"[{backend}] nesting: "
        + ", ".join(
            f"{depth:,}-deep -> HTTP {answers[depth][0]} "
            + answers[depth][1].get("status", repr(answers[depth][1]["error"]))
            for depth in answers
        )
        + f"; call rows 0, audit {len(audited)}x invalid naming the limit; "
        f"{LIMIT}-deep -> {done['status']}; /v1/approvals {listed.status_code}, "
        f"inbox {inbox.status_code} with a {LIMIT}-deep request on it"
    )


def test_a_batch_counts_a_too_deep_call_as_rejected(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    deep = nested_args_json(LIMIT + 1)
    as_json = (
        '{"calls": [{"tool": "echo", "args": {"n": 1}}, '
        f'{{"tool": "echo", "args": {deep}}}, {{"tool": "echo", "args": {{"n": 2}}}}]}}'
    )
    as_ndjson = "\n".join(
        [
            '{"tool": "echo", "args": {"n": 3}}',
            f'{{"tool": "echo", "args": {nested_args_json(10_000)}}}',
            f'{{"tool": "echo", "args": {deep}}}',
        ]
    )
    receipts = []
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for content, kind in ((as_json, "application/json"), (as_ndjson, "application/x-ndjson")):
            response = http.post(
                "/v1/batches", content=content.encode(), headers={"Content-Type": kind}
            )
            assert response.status_code == 200, response.text[:300]
            receipts.append(response.json())

        def settled(batch_id: str) -> dict[str, Any] | None:
            body: dict[str, Any] = http.get(f"/v1/batches/{batch_id}").json()
            return body if body.get("done") else None

        states = [
            eventually(functools.partial(settled, r["batch_id"]), "the batch") for r in receipts
        ]
    json_receipt, ndjson_receipt = receipts
    assert json_receipt["total"] == 3 and json_receipt["accepted"] == 2
    assert json_receipt["rejected"] == [{"index": 1, "error": ARGS_TOO_DEEP}]
    assert ndjson_receipt["total"] == 3 and ndjson_receipt["accepted"] == 1
    assert ndjson_receipt["rejected"] == [
        {"index": 1, "error": "malformed body: nested too deeply"},
        {"index": 2, "error": ARGS_TOO_DEEP},
    ]
    assert [state["rejected"] for state in states] == [1, 2], states
    assert [state["counts"]["succeeded"] for state in states] == [2, 1], states
    assert call_rows_by(stack, name) == 3
    invalid = [event for event, _, _ in audit_by(stack, name) if event == "invalid"]
    print(
        f"[{backend}] nesting in batches: JSON batch of 3 with one {LIMIT + 1}-deep -> "
        f"accepted {json_receipt['accepted']}, rejected {len(json_receipt['rejected'])}; "
        f"NDJSON batch of 3 with a 10,000-deep and a {LIMIT + 1}-deep line -> accepted "
        f"{ndjson_receipt['accepted']}, rejected {len(ndjson_receipt['rejected'])}; "
        f"batch counts rejected {[s['rejected'] for s in states]}, audit {len(invalid)}x invalid"
    )


def test_an_mcp_call_with_too_deep_arguments_gets_an_error_result(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    caller = Stack(env=stack.env, state_dir=stack.state_dir, base_url=stack.base_url)
    caller.keys = {"agent": token}
    outcomes: dict[str, Any] = {}

    async def scenario() -> None:
        async with mcp_session(caller) as client:
            outcomes["65"] = await client.call_tool("echo", nested_args(LIMIT + 1))

    run(scenario)

    # Deeper than the MCP SDK's own JSON parsing goes: the endpoint answers, it does not fall.
    with httpx.Client(
        base_url=stack.base_url,
        timeout=60,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        },
    ) as http:
        message = (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            f'{{"name": "echo", "arguments": {nested_args_json(10_000)}}}}}'
        )
        raw = http.post("/mcp", content=message.encode())
        shallow = message.replace(nested_args_json(10_000), '{"n": 3}')
        control = http.post("/mcp", content=shallow.encode())
    # JSON-RPC's own parse error, as JSON; the same message made shallow is answered.
    assert raw.status_code == 400 and raw.headers["content-type"] == "application/json"
    assert raw.json()["error"]["code"] == -32700, raw.text[:300]
    assert "Traceback" not in raw.text
    assert control.status_code == 200, control.text[:300]
    (event,) = [line for line in control.text.splitlines() if line.startswith("data: ")]
    assert json.loads(event.removeprefix("data: "))["result"]["isError"] is False

    async def still_there() -> None:
        async with mcp_session(caller) as client:
            outcomes["after"] = await client.call_tool("echo", {"n": 2})

    run(still_there)

    deep = outcomes["65"]
    assert deep.is_error is True
    assert text_of(deep) == ARGS_TOO_DEEP
    assert deep.structured_content is not None
    assert deep.structured_content["status"] == "rejected"
    assert outcomes["after"].is_error is False
    assert outcomes["after"].structured_content["value"] == {"n": 2}
    events = [event for event, _, _ in audit_by(stack, name)]
    assert events.count("invalid") == 1, events
    print(
        f"[{backend}] nesting over MCP: tools/call {LIMIT + 1}-deep -> isError, "
        f"{text_of(deep)!r}; raw JSON-RPC 10,000-deep -> HTTP {raw.status_code} "
        f"{raw.json()['error']['message']!r}, the same made shallow -> {control.status_code}; "
        f"next call -> {outcomes['after'].structured_content['status']}; audit {events}"
    )


# == private stacks: a config with secrets and a tool that answers too deeply ===============


class ChattyHook(BaseHTTPRequestHandler):
    """An endpoint that says no, repeating what it was sent (as many real services do)."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        message = f"no hook at {self.path} for {self.headers.get('Authorization')}"
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
"""


@pytest.fixture(scope="module")
def chatty_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChattyHook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module", params=BACKENDS)
def secret_stack(
    request: pytest.FixtureRequest,
    redis_base: str,
    chatty_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SecretStack]:
    """An API and a worker of their own whose config holds a ``${TR_TEST_TOKEN}`` secret
    in an HTTP tool's url and header, and a tool that answers as deeply as it is asked."""
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
    private = SecretStack(
        Stack(
            env=stack_env(
                database_url=database_url,
                redis_url=redis_url,
                state_dir=state_dir,
                TOOLROUTER_CONFIG=str(config),
                TR_TEST_TOKEN=secret,
            ),
            state_dir=state_dir,
        ),
        backend,
        secret,
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


# == 2. inbox sessions ======================================================================


def test_an_inbox_session_is_an_opaque_id_stored_only_as_its_hash(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    cookie = session_cookie(sign_in(stack.base_url, token))
    # Not the key, nor the key in any reversible dress.
    assert cookie != token and token not in cookie
    padded = cookie + "=" * (-len(cookie) % 4)
    for decode in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            decoded = decode(padded.encode("ascii"))
        except ValueError:
            continue
        assert token.encode() not in decoded
    assert base64.urlsafe_b64encode(token.encode()).decode().rstrip("=") not in cookie
    assert is_inbox_of(inbox_page(stack.base_url, cookie), name)
    # The cookie opens /ui/ and nothing else: as a key it is refused.
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        as_bearer = http.get("/v1/tools", headers={"Authorization": f"Bearer {cookie}"})
        as_cookie_only = http.get("/v1/tools", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
    assert as_bearer.status_code == 401 and as_cookie_only.status_code == 401
    # The database holds its SHA-256 and nothing from which the cookie could be read back.
    (row,) = session_rows(stack, name)
    assert row.id_hash == hashlib.sha256(cookie.encode()).hexdigest()
    assert all(cookie not in str(value) for value in row)
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        every_row = [str(tuple(r)) for r in conn.execute(sql_select(ui_sessions)).all()]
    assert not any(cookie in r for r in every_row)
    print(
        f"[{backend}] session: cookie of {len(cookie)} chars is neither the key nor base64 of it; "
        f"as Bearer -> {as_bearer.status_code}, on /v1 -> {as_cookie_only.status_code}; "
        f"stored as sha256 ({row.id_hash[:12]}...), cookie found in {len(every_row)} rows: 0"
    )


def test_sign_out_and_revocation_end_sessions_on_the_server(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    cookie = session_cookie(sign_in(stack.base_url, token))
    page = inbox_page(stack.base_url, cookie)
    assert is_inbox_of(page, name)
    # Sign-out without the page's token is refused, and the session lives on.
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        forged = http.post("/ui/logout", data={}, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
        assert forged.status_code == 403
        assert is_inbox_of(inbox_page(stack.base_url, cookie), name)
        out = http.post(
            "/ui/logout",
            data={"csrf": csrf_of(page)},
            headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
        )
    assert out.status_code == 303
    # The browser's copy of the cookie is worth nothing now: ended on the server.
    assert is_login_page(inbox_page(stack.base_url, cookie))
    assert inbox_page(stack.base_url, cookie, "/ui/pending.json").status_code == 401
    (ended,) = session_rows(stack, name)
    assert ended.ended_at is not None

    # Two live sessions of one key; revoking the key ends both at once.
    first = session_cookie(sign_in(stack.base_url, token))
    second = session_cookie(sign_in(stack.base_url, token))
    assert first != second
    assert all(is_inbox_of(inbox_page(stack.base_url, c), name) for c in (first, second))
    with runtime_of(stack.settings) as runtime:
        runtime.keys.revoke(name)
    after = [inbox_page(stack.base_url, c) for c in (first, second)]
    assert all(is_login_page(page) for page in after)
    assert all(
        inbox_page(stack.base_url, c, "/ui/pending.json").status_code == 401
        for c in (first, second)
    )
    assert all(row.ended_at is not None for row in session_rows(stack, name))
    # And the revoked key cannot start a new one.
    again = sign_in(stack.base_url, token)
    assert again.status_code == 401 and SESSION_COOKIE not in again.cookies
    print(
        f"[{backend}] session end: logout without csrf -> {forged.status_code}, with csrf -> "
        f"{out.status_code}, old cookie -> login page; revoke with 2 live sessions -> both "
        f"login page at once ({len(session_rows(stack, name))} rows ended); "
        f"sign-in with the revoked key -> {again.status_code}"
    )


def test_sign_in_is_refused_unless_posted_from_the_inbox_own_origin(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    foreign = "http://evil.example"
    attempts = {
        "no Origin, no Sec-Fetch-Site": {},
        "foreign Origin": {"Origin": foreign},
        "foreign Origin, same-origin claim": {"Origin": foreign, "Sec-Fetch-Site": "same-origin"},
        "own Origin, cross-site fetch": {"Origin": stack.base_url, "Sec-Fetch-Site": "cross-site"},
        "Origin null": {"Origin": "null"},
        "own Origin on another scheme": {"Origin": stack.base_url.replace("http:", "https:")},
    }
    answers = {}
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        for what, headers in attempts.items():
            response = http.post("/ui/login", data={"key": token}, headers=headers)
            answers[what] = response.status_code
            assert response.status_code == 403, (what, response.status_code)
            assert SESSION_COOKIE not in response.cookies
        assert session_rows(stack, name) == []
        ok = http.post("/ui/login", data={"key": token}, headers=browser_headers(stack))
    assert ok.status_code == 303 and len(session_rows(stack, name)) == 1
    print(
        f"[{backend}] sign-in origin: "
        + ", ".join(f"{what} -> {code}" for what, code in answers.items())
        + f"; own Origin -> {ok.status_code}; sessions made by refused attempts: 0"
    )


def test_repeated_failed_sign_ins_from_one_address_are_throttled(
    stack: Stack, tmp_path: Path, redis_base: str
) -> None:
    backend = backend_of(stack)
    allowed = stack.settings.ui_login_failures_per_minute
    _, token = new_key(stack, "approver")
    # An API process of its own on a Redis db of its own (API processes share the count
    # through Redis), so the throttle it fills is nobody else's.
    own_redis_url = f"{redis_base}/{TRUST_REDIS_DB}"
    forget_counts(own_redis_url, stack.settings)
    try:
        with second_api(
            stack, tmp_path / "api.log", TOOLROUTER_REDIS_URL=own_redis_url
        ) as base_url:
            failures = [sign_in(base_url, f"trk_guess-{i}").status_code for i in range(allowed)]
            blocked = sign_in(base_url, token)
            blocked_bad = sign_in(base_url, "trk_guess-more")
            # A client naming another address is still the address it connects from.
            spoofed = [
                sign_in(base_url, key, {"X-Forwarded-For": f"10.1.1.{i}"}).status_code
                for i, key in enumerate((token, "trk_guess-spoofed"))
            ]
            # A refused origin is not a failed sign-in and is answered as before.
            with httpx.Client(base_url=base_url, timeout=30) as http:
                no_origin = http.post("/ui/login", data={"key": token}).status_code
            api_still = httpx.get(
                f"{base_url}/v1/tools", headers={"Authorization": f"Bearer {token}"}, timeout=30
            ).status_code
    finally:
        forget_counts(own_redis_url, stack.settings)
    assert failures == [401] * allowed
    assert blocked.status_code == 429 and SESSION_COOKIE not in blocked.cookies
    assert "Too many failed sign-ins" in blocked.text
    assert blocked_bad.status_code == 429
    assert spoofed == [429, 429]
    assert no_origin == 403
    assert api_still == 200  # the API itself is not throttled
    # The stack's API counts in its own Redis: the same key signs in there.
    elsewhere = sign_in(stack.base_url, token)
    assert elsewhere.status_code == 303
    print(
        f"[{backend}] sign-in throttle: {allowed} wrong keys -> {failures}; then the right key "
        f"-> {blocked.status_code}, a wrong one -> {blocked_bad.status_code}; /v1 with the key "
        f"-> {api_still}"
    )


def forget_counts(redis_url: str, settings: Settings) -> None:
    """Drop a deployment's failed sign-in counts from one Redis db (and nothing else there)."""
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter(match=derive_namespace(settings) + ":login-failures:*"):
            client.delete(key)
    finally:
        client.close()


def test_a_real_browser_signs_in_and_its_sign_out_ends_the_server_session(
    stack: Stack,
) -> None:
    playwright_sync = pytest.importorskip("playwright.sync_api")
    from ..browser.test_inbox import CHROMIUM

    if not Path(CHROMIUM).exists():
        if services.IN_CI:
            pytest.fail(f"Chromium is needed and is not at {CHROMIUM}")
        pytest.skip(f"Chromium is not at {CHROMIUM}")
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
        )
        try:
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{stack.base_url}/ui/")
            page.fill("#key", token)
            page.click("button[type=submit]")
            page.locator("button.link").wait_for()
            (cookie,) = [c for c in context.cookies() if c["name"] == SESSION_COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["value"] != token
            assert page.evaluate("document.cookie").find(SESSION_COOKIE) == -1
            page.click("button.link")
            page.locator("#key").wait_for()
            context.close()
        finally:
            browser.close()
    # The value the browser held no longer opens anything.
    assert is_login_page(inbox_page(stack.base_url, cookie["value"]))
    (row,) = session_rows(stack, name)
    assert row.ended_at is not None
    print(
        f"[{backend}] browser: Chromium's own sign-in accepted (httpOnly, SameSite=Strict, not "
        f"visible to scripts); its sign-out -> the old cookie gets the login page"
    )


# == 3. secrets from ${VAR} =================================================================

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


# == 4. file modes ==========================================================================


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_of(settings: Settings) -> dict[str, int | None]:
    """The mode of each file a SQLite deployment keeps (None: absent)."""
    database = Path(settings.resolved_database_url.split("///", 1)[1])
    secret_key = key_file(settings, derive_namespace(settings))
    paths = {
        "state dir": settings.state_dir,
        "database": database,
        "database-wal": database.with_name(database.name + "-wal"),
        "database-shm": database.with_name(database.name + "-shm"),
        "secrets dir": secret_key.parent,
        "secret.key": secret_key,
        "flower-password": settings.state_dir / "flower-password",
    }
    return {what: mode(path) if path.exists() else None for what, path in paths.items()}


def all_present(modes: dict[str, int | None]) -> dict[str, int | None] | None:
    return modes if all(value is not None for value in modes.values()) else None


PRIVATE_MODES = {
    "state dir": 0o700,
    "database": 0o600,
    "database-wal": 0o600,
    "database-shm": 0o600,
    "secrets dir": 0o700,
    "secret.key": 0o600,
    "flower-password": 0o600,
}


def octal(modes: dict[str, int | None]) -> str:
    return ", ".join(f"{k} {oct(v) if v is not None else 'absent'}" for k, v in modes.items())


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_a_running_sqlite_deployment_keeps_its_files_owner_only(stack: Stack) -> None:
    with stack.client("agent") as http:  # a write, so the write-ahead log is in use
        assert (
            http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 30}).json()["status"]
            == "succeeded"
        )
    settings = stack.settings
    processes.flower_password(settings)
    modes = eventually(
        lambda: all_present(modes_of(settings)), "the database's -wal and -shm files"
    )
    assert modes == PRIVATE_MODES, octal(modes)
    print(f"[sqlite] file modes of the running stack: {octal(modes)}")


def test_a_careless_umask_still_leaves_every_file_owner_only(
    redis_base: str, tmp_path: Path
) -> None:
    """Started with umask 000 in a state directory someone made world-writable."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    secrets_root = tmp_path / "secrets-root"
    env = stack_env(
        database_url=f"sqlite:///{state / 'toolrouter.db'}",
        redis_url=f"{redis_base}/{TRUST_REDIS_DB}",
        state_dir=state,
        TOOLROUTER_SECRETS_DIR=str(secrets_root),
    )
    settings = Stack(env=env, state_dir=state).settings
    port, flower_port = free_port(), free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], log: str, **extra: str) -> subprocess.Popen[bytes]:
        with (logs / log).open("wb") as handle:
            process = subprocess.Popen(
                argv,
                env={**env, **extra},
                cwd=REPO,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0,
            )
        started.append(process)
        return process

    try:
        # The operator's command: it brings the new database up to date, then runs uvicorn.
        api = start(
            [sys.executable, "-m", "router.cli.main", "api", "--port", str(port)], "api.log"
        )
        wait_for_http(f"http://127.0.0.1:{port}/healthz", api, "see api.log", timeout=90)
        flower = start(
            [sys.executable, "-m", "router.cli.main", "flower"],
            "flower.log",
            TOOLROUTER_FLOWER_PORT=str(flower_port),
            TOOLROUTER_FLOWER_HOST="127.0.0.1",
        )
        eventually(
            lambda: (state / "flower-password").exists() or flower.poll() is not None,
            "flower's password file",
        )
        # A write through the API, so its connections keep the write-ahead log open.
        with runtime_of(settings) as runtime:
            token = runtime.keys.create("careless", ["agent"])
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            http.post(
                "/v1/calls",
                json={"tool": "echo", "args": {}},
                headers={"Authorization": f"Bearer {token}"},
            )
        modes = eventually(lambda: all_present(modes_of(settings)), "every file of the deployment")
    finally:
        for process in started:
            stop_group(process)
    assert modes == PRIVATE_MODES, octal(modes)
    loose = sorted(
        f"{p.relative_to(state)} {oct(mode(p))}"
        for p in state.rglob("*")
        if mode(p) & 0o077 and not p.is_symlink()
    )
    print(
        f"[sqlite] umask 000, state dir made 0777 beforehand: {octal(modes)}; secrets root "
        f"{oct(mode(secrets_root))}; inside the 0700 state dir, still group/other-accessible: "
        f"{len(loose)} {loose[:3]}"
    )


# == 5. request bodies ======================================================================


def test_a_declared_200_mb_body_is_refused_from_its_headers_alone(stack: Stack) -> None:
    backend = backend_of(stack)
    api = psutil.Process(stack.processes["api"].pid)
    before = rss(api)
    host, port = address(stack)
    declared = 200 * MIB
    head = (
        f"POST /v1/calls HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {stack.keys['agent']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head)  # and not one byte of the body
        status, headers, body = read_response(sock)
    elapsed = time.monotonic() - started
    limit = stack.settings.max_args_bytes + 16 * 1024
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "ok": False,
        "error": f"body is {declared} bytes, over the limit of {limit}",
    }
    assert elapsed < 5, elapsed
    grew = rss(api) - before
    assert grew < 16 * MIB, grew
    print(
        f"[{backend}] body: Content-Length {declared // MIB} MB, headers only -> {status} in "
        f"{elapsed * 1000:.0f} ms without the body; API RSS grew {grew / MIB:+.1f} MB"
    )


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(stack: Stack) -> None:
    backend = backend_of(stack)
    api = psutil.Process(stack.processes["api"].pid)
    before = rss(api)
    host, port = address(stack)
    limit = stack.settings.max_args_bytes + 16 * 1024
    ceiling = 256 * MIB  # what an endless stream would have sent by now
    piece = b'{"tool": "echo", "args": {"blob": "' + b"a" * (64 * 1024)
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    head = (
        f"POST /v1/calls HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {stack.keys['agent']}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    sent = 0
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head)
        while sent < ceiling:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break  # the server has answered: stop sending
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        status, _, body = read_response(sock)
    elapsed = time.monotonic() - started
    assert status == 413, body
    assert json.loads(body) == {"ok": False, "error": f"body is over the limit of {limit} bytes"}
    assert sent < ceiling, "the server never answered while the body kept coming"
    grew = rss(api) - before
    assert grew < 32 * MIB, grew
    # The API answers the next request as usual.
    with stack.client("agent") as http:
        next_call = http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 30})
    assert next_call.json()["status"] == "succeeded"
    print(
        f"[{backend}] body: chunked, no length, growing -> {status} after {sent / MIB:.1f} MB "
        f"sent (limit {limit / 1024:.0f} KiB) in {elapsed * 1000:.0f} ms; API RSS grew "
        f"{grew / MIB:+.1f} MB; next call -> {next_call.json()['status']}"
    )
