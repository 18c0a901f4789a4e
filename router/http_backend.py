"""The clients' transport: httpx's own, on connections that send a request in one piece
and (async) look up their socket once.

httpcore writes a request's head and its body separately: two sends, two TCP segments,
and on the server two reads and two passes of its HTTP parser (a send was an eighth of
the async client's CPU per call in the benchmark's profile). The streams here hold the
pieces until the response is read, then send them together.

Before each request httpcore asks every idle connection of the pool whether the server
has closed it (``get_extra_info("is_readable")``). httpcore's anyio stream answers by
asking anyio for the raw socket, and anyio rebuilds its whole table of socket attributes
to answer, ``getpeername`` included: about a tenth of ``AsyncClient``'s CPU per call with
64 calls in flight in the benchmark's profile. The streams here keep the socket from
the start and answer with one ``poll``; everything else is httpcore's anyio backend.
"""

from __future__ import annotations

import contextlib
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


class HeldWrites:
    """What httpcore wrote and a stream has not sent yet."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0
        self.timeout: float | None = None

    def hold(self, buffer: bytes, timeout: float | None) -> bool:
        """Hold ``buffer``; True when what is held should go now (too much to hold)."""
        if buffer:
            self.pieces.append(buffer)
            self.size += len(buffer)
            self.timeout = timeout
        return self.size >= COALESCE_BYTES

    def take(self) -> bytes:
        data = b"".join(self.pieces)
        self.pieces.clear()
        self.size = 0
        return data


class SocketKeepingStream(httpcore.AsyncNetworkStream):
    """httpcore's stream, with its raw socket looked up once, when it connected, and a
    request sent in one piece."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._socket: socket.socket | None = stream.get_extra_info("socket")
        self._held = HeldWrites()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held.pieces:
            # As httpcore does with a failed write: read on, for a response the server
            # may have sent before it closed (a 413, say).
            with contextlib.suppress(httpcore.WriteError):
                await self._stream.write(self._held.take(), self._held.timeout)
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._held.hold(buffer, timeout):
            await self._stream.write(self._held.take(), timeout)

    async def aclose(self) -> None:
        self._held.take()
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


class OnePieceStream(httpcore.NetworkStream):
    """httpcore's blocking stream, sending a request in one piece."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream
        self._held = HeldWrites()

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held.pieces:
            with contextlib.suppress(httpcore.WriteError):  # as in SocketKeepingStream
                self._stream.write(self._held.take(), self._held.timeout)
        return self._stream.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._held.hold(buffer, timeout):
            self._stream.write(self._held.take(), timeout)

    def close(self) -> None:
        self._held.take()
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return OnePieceStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class OnePieceBackend(httpcore.NetworkBackend):
    """httpcore's blocking backend, handing out ``OnePieceStream``s."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return OnePieceStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return OnePieceStream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def send_in_one_piece(client: httpx.Client) -> httpx.Client:
    """``client``, its connection pools put on ``OnePieceBackend`` (as ``keep_sockets``
    does for the async client, and with the same fallback)."""
    _set_backend(client, httpcore.ConnectionPool, OnePieceBackend)
    return client


def _set_backend(client: httpx.Client | httpx.AsyncClient, pool_type: type, backend: type) -> None:
    transports = [getattr(client, "_transport", None)]
    transports += list((getattr(client, "_mounts", None) or {}).values())
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, pool_type) and hasattr(pool, "_network_backend"):
            pool._network_backend = backend()
        elif transport is not None:
            log.warning("httpx's transport has changed; its pools are left as httpx made them")


def keep_sockets(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """``client``, its connection pools (the direct one and any proxy's from the
    environment) put on ``SocketKeepingBackend``.

    httpx offers no way to choose a pool's network backend, and passing a transport of
    our own would switch off its proxy settings; so the backend is set on the pools httpx
    made (``_transport``, ``_mounts``, ``_pool._network_backend``: private to httpx and
    httpcore). Should a release rename any of them, the pools stay as httpx made them:
    slower, still right.
    """
    _set_backend(client, httpcore.AsyncConnectionPool, SocketKeepingBackend)
    return client
