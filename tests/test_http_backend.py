"""The async client's transport (``router.http_backend``): idle connections are checked
with one ``poll`` on the socket kept since connecting, and still found out when the server
has closed them; a request goes out in one send. A real server on a real socket."""

from __future__ import annotations

import asyncio
import hashlib
import socket

import httpcore
import httpx
import pytest

from router import AsyncClient, Client
from router.http_backend import (
    COALESCE_BYTES,
    OnePieceBackend,
    OnePieceStream,
    SocketKeepingBackend,
    SocketKeepingStream,
    is_readable,
    keep_sockets,
    send_in_one_piece,
)
from router.wire import SHARD_LIMITS, tls_context


def test_is_readable_sees_data_and_a_closed_peer() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert not is_readable(ours)
        theirs.sendall(b"x")
        assert is_readable(ours)
        ours.recv(1)
        assert not is_readable(ours)
        theirs.close()
        assert is_readable(ours)  # the b"" of a closed connection is waiting
    finally:
        ours.close()
    assert is_readable(ours)  # closed here: fileno() is -1
    assert is_readable(None)


async def http_server(*, close_after_answer: bool, requests: list[bytes]) -> asyncio.Server:
    """A minimal HTTP/1.1 server: answers ``{}`` to each request (keeping the connection
    open unless told to close it), and writes down each request line it got."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                requests.append(head.split(b"\r\n", 1)[0])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
                if close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def connections_for_three_requests(close_after_answer: bool) -> tuple[list[int], int]:
    opened = 0

    async def scenario() -> list[int]:
        nonlocal opened
        requests: list[bytes] = []
        server = await http_server(close_after_answer=close_after_answer, requests=requests)
        port = server.sockets[0].getsockname()[1]

        def count(*_: object) -> None:
            nonlocal opened
            opened += 1

        statuses = []
        client = keep_sockets(httpx.AsyncClient(limits=SHARD_LIMITS, verify=tls_context()))
        async with server, client:
            for _ in range(3):
                response = await client.get(
                    f"http://127.0.0.1:{port}/", extensions={"trace": _counting(count)}
                )
                statuses.append(response.status_code)
                await asyncio.sleep(0.05)  # a close from the server reaches us
        return statuses

    return asyncio.run(scenario()), opened


def _counting(count: object) -> object:
    async def trace(event: str, _info: dict[str, object]) -> None:
        if event == "connection.connect_tcp.complete":
            count()  # type: ignore[operator]

    return trace


def test_a_connection_the_server_closed_is_not_used_again() -> None:
    """The server answers with keep-alive, then closes the connection: the next request
    must go out on a new connection, not fail on the dead one."""
    statuses, opened = connections_for_three_requests(close_after_answer=True)
    assert statuses == [200, 200, 200]
    assert opened == 3


def test_a_connection_the_server_keeps_is_used_again() -> None:
    statuses, opened = connections_for_three_requests(close_after_answer=False)
    assert statuses == [200, 200, 200]
    assert opened == 1


async def proxy_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, requests: list[bytes]
) -> asyncio.Server:
    """A scripted server that ``HTTP_PROXY`` points at; it records what it is asked."""
    proxy = await http_server(close_after_answer=False, requests=requests)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    return proxy


def test_the_async_client_still_goes_through_the_proxy_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests: list[bytes] = []

    async def scenario() -> object:
        proxy = await proxy_in_the_environment(monkeypatch, requests)
        async with proxy, AsyncClient("http://toolrouter.invalid:8000", "key") as client:
            answer = await client.submit("echo", {})
            with client._pools.lease() as http:
                pools = [t._pool for t in http._mounts.values()]  # type: ignore[attr-defined]
        return answer, pools

    answer, pools = asyncio.run(scenario())  # type: ignore[misc]
    # The proxy got the request for the API (its answer, {}, is no call result).
    assert requests == [b"POST http://toolrouter.invalid:8000/v1/calls HTTP/1.1"]
    # The answer came back from the proxy (one that never got there would be a 503).
    assert (answer.status, answer.call_id, answer.http_status) == ("unavailable", None, 200)
    assert pools and all(isinstance(p._network_backend, SocketKeepingBackend) for p in pools)


def test_the_blocking_client_still_goes_through_the_proxy_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests: list[bytes] = []

    async def scenario() -> object:
        proxy = await proxy_in_the_environment(monkeypatch, requests)
        async with proxy:
            with Client("http://toolrouter.invalid:8000", "key") as client:
                assert client._fast is None  # SyncFastTransport knows no proxies
                return await asyncio.to_thread(client.submit, "echo", {})

    answer = asyncio.run(scenario())
    assert requests == [b"POST http://toolrouter.invalid:8000/v1/calls HTTP/1.1"]
    # The answer came back from the proxy (one that never got there would be a 503).
    assert (answer.status, answer.call_id, answer.http_status) == ("unavailable", None, 200)  # type: ignore[attr-defined]


def test_the_async_client_pools_use_the_socket_keeping_backend() -> None:
    async def scenario() -> object:
        async with AsyncClient("http://127.0.0.1:9", "key") as client:
            with client._pools.lease() as http:
                return http._transport._pool._network_backend  # type: ignore[attr-defined]

    assert isinstance(asyncio.run(scenario()), SocketKeepingBackend)


class RecordingStream(httpcore.AsyncNetworkStream):
    """Stands for the socket: writes down each send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\n"

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.sent.append(buffer)

    async def aclose(self) -> None:
        pass


class RecordingSyncStream(httpcore.NetworkStream):
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b"HTTP/1.1 200 OK\r\n"

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.sent.append(buffer)


def test_the_blocking_client_sends_a_request_in_one_piece_too() -> None:
    inner = RecordingSyncStream()
    stream = OnePieceStream(inner)
    stream.write(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
    stream.write(b"{}")
    stream.write(b"")
    assert inner.sent == []
    stream.read(65536)
    stream.write(b"x" * COALESCE_BYTES)
    assert inner.sent == [b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", b"x" * COALESCE_BYTES]


def test_the_blocking_client_pool_uses_the_one_piece_backend() -> None:
    with Client("http://127.0.0.1:9", "key") as client:
        backend = client._http._transport._pool._network_backend  # type: ignore[attr-defined]
    assert isinstance(backend, OnePieceBackend)


def test_a_request_goes_out_in_one_send_and_a_large_body_as_it_comes() -> None:
    async def scenario() -> list[bytes]:
        inner = RecordingStream()
        stream = SocketKeepingStream(inner)
        # As httpcore writes a small request: head, body, and the empty end of message.
        await stream.write(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n")
        await stream.write(b"{}")
        await stream.write(b"")
        assert inner.sent == []  # held until the response is read
        await stream.read(65536)
        # A body over the limit is not held in memory.
        await stream.write(b"POST / HTTP/1.1\r\n\r\n")
        await stream.write(b"x" * COALESCE_BYTES)
        return inner.sent

    sent = asyncio.run(scenario())
    assert sent[0] == b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    assert sent[1] == b"POST / HTTP/1.1\r\n\r\n" + b"x" * COALESCE_BYTES
    assert len(sent) == 2


def test_bodies_small_and_large_reach_a_real_server_whole() -> None:
    """Over a real socket: each body arrives complete, however it was sent."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                answer = hashlib.sha256(body).hexdigest().encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n" + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    bodies = [b"{}", b"y" * 10, b"z" * (3 * COALESCE_BYTES + 5), b"{}"]

    def blocking(port: int) -> list[str]:
        with send_in_one_piece(httpx.Client(verify=tls_context())) as client:
            return [client.post(f"http://127.0.0.1:{port}/", content=b).text for b in bodies]

    async def scenario() -> tuple[list[str], list[str]]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = keep_sockets(httpx.AsyncClient(limits=SHARD_LIMITS, verify=tls_context()))
        async with server, client:
            answers = [
                (await client.post(f"http://127.0.0.1:{port}/", content=body)).text
                for body in bodies
            ]
            return answers, await asyncio.to_thread(blocking, port)

    expected = [hashlib.sha256(b).hexdigest() for b in bodies]
    assert asyncio.run(scenario()) == (expected, expected)
