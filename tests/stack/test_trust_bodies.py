"""Request bodies declared or streamed past their limit, or cut off by a client that leaves,
and requests no HTTP parser takes, sent raw to a real API process on both databases.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import time

import psutil
import pytest

from router.api.app import CLIENT_LEFT

from ..support.launcher import log_size
from ..support.stack import Stack
from ..support.trust import (
    MIB,
    address,
    backend_of,
    eventually,
    read_response,
    rss,
)


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
    limit = stack.settings.call_body_bytes
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


def test_arguments_under_the_limit_are_taken_as_python_writes_them_escaped(
    stack: Stack,
) -> None:
    # 200 KiB of UTF-8, under the 256 KiB limit; json.dumps writes each character as \u00e9.
    text = "é" * (100 * 1024)
    body = json.dumps({"tool": "echo", "args": {"text": text}})
    assert len(body) > 2 * stack.settings.max_args_bytes
    with stack.client("agent") as http:
        answer = http.post("/v1/calls", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code < 300, answer.text[:300]
        assert answer.json()["call_id"], answer.text[:300]
        # Arguments over the limit in UTF-8 are refused by the dispatcher once read.
        over = json.dumps({"tool": "echo", "args": {"text": "é" * (128 * 1024)}})
        refused = http.post("/v1/calls", content=over, headers={"Content-Type": "application/json"})
        assert refused.status_code == 413, refused.text[:300]
        assert "over the limit of" in refused.json()["error"]


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(stack: Stack) -> None:
    backend = backend_of(stack)
    api = psutil.Process(stack.processes["api"].pid)
    before = rss(api)
    host, port = address(stack)
    limit = stack.settings.call_body_bytes
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


# A path an agent chose (a request id is anything until looked up), percent-decoded by the
# server: a terminal title, a right-to-left override, a NUL.
HOSTILE_PATH = "/v1/approvals/req-a%1b%5d0;t%07%e2%80%aez%00/approve"


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/v1/calls", "/v1/calls"),
        ("/v1/batches", "/v1/batches"),
        (HOSTILE_PATH, "/v1/approvals/req-a\\x1b]0;t\\x07\\u202ez\\x00/approve"),
    ],
)
def test_a_client_that_leaves_mid_body_is_logged_in_one_line(
    stack: Stack, path: str, shown: str
) -> None:
    backend = backend_of(stack)
    log = stack.launcher.log_path("api")
    seen = log_size(log)
    host, port = address(stack)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {stack.keys['agent']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: 1000\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head + b'{"tool": "echo", ')  # and then the client is gone

    def logged() -> str | None:
        with log.open("rb") as file:
            file.seek(seen)
            text = file.read().decode(errors="replace")
        return text if CLIENT_LEFT in text or "Traceback" in text else None

    written = eventually(logged, f"the API to log the request to {path} it lost")
    assert "Traceback" not in written, written
    line = next(line for line in written.splitlines() if CLIENT_LEFT in line)
    assert shown in line and line.isprintable(), line
    print(f"\n[{backend}] client gone mid-body on {path} -> logged {line!r}")


MALFORMED_REQUESTS = {
    "no method": b"GARBAGE\r\n\r\n",
    "a control byte in a header name": b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad\x01: y\r\n\r\n",
    "a length that is no number": (
        b"POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n{}"
    ),
    "a version no server speaks": b"GET /healthz HTTP/7.3\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("what", MALFORMED_REQUESTS)
def test_a_request_no_parser_takes_is_answered_in_json(stack: Stack, what: str) -> None:
    host, port = address(stack)
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(MALFORMED_REQUESTS[what])
        status, headers, body = read_response(sock)
        closed = sock.recv(1) == b""
    assert status == 400, (what, body)
    assert headers["content-type"] == "application/json", (what, headers)
    assert json.loads(body) == {"ok": False, "error": "malformed HTTP request"}, what
    assert closed, what
    with stack.client("agent") as http:
        assert http.get("/healthz").status_code == 200
    print(f"\n[{backend_of(stack)}] {what} -> {status} {body.decode()}")


def test_a_compressed_body_is_refused_for_what_it_is(stack: Stack) -> None:
    # Read as text, a gzip body was "not valid UTF-8 (byte 1)": true, and no help.
    calls = json.dumps({"calls": [{"tool": "echo", "args": {}}]}).encode()
    with stack.client("agent") as http:
        for path, body in (("/v1/batches", calls), ("/v1/calls", b'{"tool": "echo"}')):
            packed = http.post(
                path,
                content=gzip.compress(body),
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
            assert packed.status_code == 415, packed.text
            assert packed.json() == {
                "ok": False,
                "error": "Content-Encoding gzip is not accepted: send the body as is",
            }
            plain = http.post(
                path,
                content=body,
                headers={"Content-Type": "application/json", "Content-Encoding": "identity"},
            )
            assert plain.status_code == 200, plain.text
