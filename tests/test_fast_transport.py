"""``FastTransport`` and ``SyncFastTransport`` (the clients' calls) against real sockets:
a scripted HTTP server on localhost plays what a server or the network may do, and each
test runs with both (the blocking one from threads, as an application's threads would
use it). Their use against the real API is in ``test_client.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from router import fast_transport
from router.fast_transport import (
    FastTransport,
    SyncFastTransport,
    fast_transport_for,
    sync_fast_transport_for,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head and body (bodies here always have a content-length)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


class Server:
    """A server on a free port; ``connections`` counts the connections it accepted."""

    def __init__(self, handler: Handler) -> None:
        self.handler, self.connections, self.open_now, self.most_open = handler, 0, 0, 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> Server:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
            try:
                await self.handler(reader, writer)
            finally:
                self.open_now -= 1
                writer.close()

        self._server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()

    async def answer_each(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: bytes
    ) -> None:
        while (request := await read_request(reader)) is not None:
            self.requests.append(request)
            writer.write(response)
            await writer.drain()


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), timeout=30))


class Http:
    """An httpx client on one of the two transports, used the same way from a scenario."""

    def __init__(self, url: str, flavour: str, **kw: Any) -> None:
        self.flavour = flavour
        self._async = httpx.AsyncClient(base_url=url, transport=FastTransport(**kw), timeout=5)
        self._sync = httpx.Client(base_url=url, transport=SyncFastTransport(**kw), timeout=5)

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        if self.flavour == "async":
            return await self._async.request(method, url, **kw)
        return await asyncio.to_thread(self._sync.request, method, url, **kw)

    async def get(self, url: str, **kw: Any) -> httpx.Response:
        return await self.request("GET", url, **kw)

    async def post(self, url: str, **kw: Any) -> httpx.Response:
        return await self.request("POST", url, **kw)

    async def __aenter__(self) -> Http:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self._async.aclose()
        self._sync.close()


def client(server: Server, flavour: str, **kw: Any) -> Http:
    return Http(server.url, flavour, **kw)


@pytest.fixture(params=["async", "sync"])
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def test_requests_go_whole_and_keep_alive_connections_are_reused(flavour: str) -> None:
    async def scenario() -> None:
        server: Server

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await server.answer_each(r, w, OK)

        async with Server(handler) as server, client(server, flavour) as http:
            for i in range(3):
                response = await http.post("/v1/calls", params={"i": i}, json={"n": i})
                assert (response.status_code, response.json()) == (200, {"ok": True})
            assert server.connections == 1
            assert server.requests[2].startswith(b"POST /v1/calls?i=2 HTTP/1.1\r\n")
            assert server.requests[2].endswith(b'\r\n\r\n{"n":2}')

    run(scenario)


def test_chunked_and_close_delimited_bodies_are_read_whole(flavour: str) -> None:
    chunked = (
        b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
    )
    until_close = b'HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{"b":2}'

    async def scenario() -> None:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await read_request(r)
            w.write(chunked)
            await read_request(r)
            w.write(until_close)
            await w.drain()

        async with Server(handler) as server, client(server, flavour) as http:
            assert (await http.get("/a")).json() == {"a": 1}
            assert (await http.get("/b")).json() == {"b": 2}
            # The connection was closed with that answer: the next request opens another.
            assert (await http.get("/a")).json() == {"a": 1}
            assert server.connections == 2

    run(scenario)


def test_a_connection_the_server_closed_while_idle_is_not_reused(flavour: str) -> None:
    async def scenario() -> None:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await read_request(r)
            w.write(OK)
            await w.drain()
            # Then closes it, as uvicorn does after its keep-alive timeout.

        async with Server(handler) as server, client(server, flavour) as http:
            assert (await http.get("/")).status_code == 200
            await asyncio.sleep(0.1)  # the event loop sees the close
            assert (await http.get("/")).status_code == 200
            assert server.connections == 2

    run(scenario)


def test_a_connection_kept_past_the_keep_alive_expiry_is_not_reused(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept connection is dropped before the server's keep-alive timeout can close it
    under a new request (``wire.KEEPALIVE_EXPIRY_S``, here shortened)."""
    monkeypatch.setattr(fast_transport, "KEEPALIVE_EXPIRY_S", 0.2)

    async def scenario() -> None:
        server: Server

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await server.answer_each(r, w, OK)

        async with Server(handler) as server, client(server, flavour) as http:
            assert (await http.get("/")).status_code == 200
            assert (await http.get("/")).status_code == 200  # at once: the same connection
            assert server.connections == 1
            await asyncio.sleep(0.3)
            assert (await http.get("/")).status_code == 200
            assert server.connections == 2

    run(scenario)


def test_closing_the_blocking_transport_with_a_request_in_flight() -> None:
    """The idle connections close at once; the one in use when its request ends."""

    async def scenario() -> None:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while await read_request(r) is not None:
                await asyncio.sleep(0.2)
                w.write(OK)
                await w.drain()

        async with Server(handler) as server:
            transport = SyncFastTransport()
            with httpx.Client(base_url=server.url, transport=transport, timeout=5) as http:
                await asyncio.to_thread(http.get, "/")
                assert transport._open == 1
                in_flight = asyncio.ensure_future(asyncio.to_thread(http.get, "/"))
                await asyncio.sleep(0.1)
                transport.close()
                assert (await in_flight).status_code == 200
                assert transport._open == 0
                assert all(not kept for kept in transport._idle.values())

    run(scenario)


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"cut', httpx.RemoteProtocolError),
        (b"NOT HTTP AT ALL\r\n\r\n", httpx.RemoteProtocolError),
        (None, httpx.TimeoutException),
    ],
    ids=["cut short", "malformed", "no answer"],
)
def test_what_goes_wrong_on_the_wire_is_an_httpx_error(
    response: bytes | None, error: type[Exception], flavour: str
) -> None:
    async def scenario() -> None:
        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await read_request(r)
            if response is None:
                await asyncio.sleep(5)
                return
            w.write(response)
            await w.drain()

        async with Server(handler) as server, client(server, flavour) as http:
            with pytest.raises(error):
                await http.get("/", timeout=0.3)
            # The spoilt connection is gone: the next request has a connection of its own.
            with pytest.raises(error):
                await http.get("/", timeout=0.3)
            assert server.connections == 2

    run(scenario)


def test_a_refused_connection_is_a_connect_error(flavour: str) -> None:
    async def scenario() -> None:
        async with Server(lambda r, w: read_request(r)) as server:  # type: ignore[arg-type,return-value]
            url = server.url
        async with Http(url, flavour) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get("/")

    run(scenario)


def test_no_more_connections_than_allowed_and_every_request_answered(flavour: str) -> None:
    async def scenario() -> None:
        server: Server

        async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while await read_request(r) is not None:
                await asyncio.sleep(0.05)
                w.write(OK)
                await w.drain()

        async with Server(handler) as server, client(server, flavour, max_connections=2) as http:
            answers = await asyncio.gather(*(http.get(f"/{i}") for i in range(7)))
            assert [a.status_code for a in answers] == [200] * 7
            assert server.most_open <= 2 and server.connections == 2

    run(scenario)


def test_only_plain_http_with_no_proxy_in_the_way_gets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for transport_for, transport in (
        (fast_transport_for, FastTransport),
        (sync_fast_transport_for, SyncFastTransport),
    ):
        monkeypatch.delenv("HTTP_PROXY", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        assert isinstance(transport_for("http://127.0.0.1:8000"), transport)
        assert transport_for("https://api.example") is None
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
        assert transport_for("http://api.example:8000") is None
        monkeypatch.setenv("NO_PROXY", "api.example")
        assert isinstance(transport_for("http://api.example:8000"), transport)
