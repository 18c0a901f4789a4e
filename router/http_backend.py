"""The async client's transport: httpx's own, on connections that look up their socket
once and send a request in one piece.

Before each request httpcore asks every idle connection of the pool whether the server
has closed it (``get_extra_info("is_readable")``). httpcore's anyio stream answers by
asking anyio for the raw socket, and anyio rebuilds its whole table of socket attributes
to answer, ``getpeername`` included: about a tenth of ``AsyncClient``'s CPU per call with
64 calls in flight in the benchmark's profile. The streams here keep the socket from
the start and answer with one ``poll``; everything else is httpcore's anyio backend.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

log = logging.getLogger(__name__)


def is_readable(sock: socket.socket | None) -> bool:
    """Whether a read would return at once (data, or the ``b""`` of a closed connection);
    a socket that is gone counts as readable, as in httpcore."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    if not hasattr(select, "poll"):  # Windows
        readable, _, _ = select.select([fd], [], [], 0)
        return bool(readable)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


# Written pieces are held back up to this much; a larger body goes out as it comes.
COALESCE_BYTES = 64 * 1024


class SocketKeepingStream(httpcore.AsyncNetworkStream):
    """httpcore's stream, with its raw socket looked up once, when it connected, and a
    request sent in one piece.

    httpcore writes a request's head and its body separately: two sends, two TCP
    segments, and on the server two reads and two passes of its HTTP parser (a send was
    an eighth of the client's CPU per call in the benchmark's profile). Here the pieces
    are held until the response is read, then sent together.
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._socket: socket.socket | None = stream.get_extra_info("socket")
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._write_timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._pending:
            try:
                await self._flush()
            except httpcore.WriteError:
                # As httpcore does with a failed write: read on, for a response the
                # server may have sent before it closed (a 413, say).
                pass
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._pending.append(buffer)
        self._pending_bytes += len(buffer)
        self._write_timeout = timeout
        if self._pending_bytes >= COALESCE_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        await self._stream.write(data, self._write_timeout)

    async def aclose(self) -> None:
        self._pending.clear()
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return SocketKeepingStream(
            await self._stream.start_tls(ssl_context, server_hostname, timeout)
        )

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return is_readable(self._socket)
        return self._stream.get_extra_info(info)


class SocketKeepingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, handing out ``SocketKeepingStream``s."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return SocketKeepingStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(path, timeout, socket_options)
        return SocketKeepingStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def keep_sockets(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """``client``, its connection pools (the direct one and any proxy's from the
    environment) put on ``SocketKeepingBackend``.

    httpx offers no way to choose a pool's network backend, and passing a transport of
    our own would switch off its proxy settings; so the backend is set on the pools httpx
    made (``_transport``, ``_mounts``, ``_pool._network_backend``: private to httpx and
    httpcore). Should a release rename any of them, the pools stay as httpx made them:
    slower, still right.
    """
    transports = [getattr(client, "_transport", None)]
    transports += list((getattr(client, "_mounts", None) or {}).values())
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
            pool._network_backend = SocketKeepingBackend()
        elif transport is not None:
            log.warning("httpx's transport has changed; idle connections are checked its way")
    return client
