"""Helpers of the trust-boundary suites (``tests/stack/test_trust_*.py``): keys and reads of
a stack's own, nested arguments, and raw HTTP for bodies a client library would not send."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import httpx
import psutil
from sqlalchemy import func
from sqlalchemy import select as sql_select

from router.db.schema import audit_log, calls
from router.runtime import Runtime
from router.settings import Settings

from .stack import Stack

T = TypeVar("T")
LIMIT = 64  # TOOLROUTER_MAX_NESTING's default
TOO_DEEP = f"nested deeper than the limit of {LIMIT} levels"
ARGS_TOO_DEEP = f"invalid arguments: arguments {TOO_DEEP}"
JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024
# Redis db of the trust suites' private stacks (namespaces keep them apart from the shared ones).
TRUST_REDIS_DB = 15
SESSION_COOKIE = "tr_session"


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
