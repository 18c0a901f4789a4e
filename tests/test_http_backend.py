"""The async client's transport (``router.http_backend``): idle connections are checked
with one ``poll`` on the socket kept since connecting, and still found out when the server
has closed them. A real server on a real socket."""

from __future__ import annotations

import asyncio
import socket

import httpx

from router import AsyncClient
from router.http_backend import SocketKeepingBackend, async_transport, is_readable
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


def test_a_connection_the_server_closed_is_not_used_again() -> None:
    """The server answers with keep-alive, then closes the connection: the next request
    must go out on a new connection, not fail on the dead one."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    async def scenario() -> list[int]:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = async_transport(limits=SHARD_LIMITS, verify=tls_context())
        statuses = []
        async with server, httpx.AsyncClient(transport=transport) as http:
            for _ in range(3):
                statuses.append((await http.get(f"http://127.0.0.1:{port}/")).status_code)
                await asyncio.sleep(0.05)  # the server's close reaches us
        return statuses

    assert asyncio.run(scenario()) == [200, 200, 200]
    assert connections == 3


def test_the_async_client_pools_use_the_socket_keeping_backend() -> None:
    async def scenario() -> object:
        async with AsyncClient("http://127.0.0.1:9", "key") as client:
            with client._pools.lease() as http:
                return http._transport._pool._network_backend  # type: ignore[attr-defined]

    assert isinstance(asyncio.run(scenario()), SocketKeepingBackend)
