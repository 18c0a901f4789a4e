"""The HTTP client handed to the MCP SDK for a server over streamable HTTP: it goes through
the proxy the environment names, as the SDK's own client does, and holds an answer that
is not an event stream to its size."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx2
import pytest

from router.tools.mcp_http import http_client

from ..support.handler_server import serving

# Nothing listens here: only a proxy can answer for it.
UNREACHABLE = "http://127.0.0.2:9/mcp"


class Proxy(BaseHTTPRequestHandler):
    """Answers every request itself, after noting the target it was asked for."""

    targets: list[str] = []
    size = 16

    def do_POST(self) -> None:
        self.targets.append(self.path)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = b"x" * self.size
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Proxy]]:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with serving(Proxy) as port:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        Proxy.targets = []
        yield Proxy


async def post(max_bytes: int, cuts: list[int] | None = None) -> httpx2.Response:
    cut = (lambda: cuts.append(1)) if cuts is not None else (lambda: None)
    async with http_client({"Authorization": "Bearer t"}, max_bytes, cut) as client:
        return await client.post(UNREACHABLE, json={"jsonrpc": "2.0"})


def test_a_server_is_reached_through_the_environments_proxy(proxy: type[Proxy]) -> None:
    proxy.size = 16
    cuts: list[int] = []
    response = asyncio.run(post(max_bytes=1024, cuts=cuts))
    assert response.status_code == 200 and response.content == b"x" * 16
    assert proxy.targets == [UNREACHABLE]
    assert cuts == []


def test_an_answer_past_the_size_is_not_read_further(proxy: type[Proxy]) -> None:
    proxy.size = 4096
    cuts: list[int] = []
    with pytest.raises(httpx2.ReadError, match="larger than 1024 bytes"):
        asyncio.run(post(max_bytes=1024, cuts=cuts))
    assert cuts == [1]
