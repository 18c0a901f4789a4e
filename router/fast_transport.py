"""The clients' transport for their calls: httpx's API over plain sockets and httptools.

``AsyncClient.call`` spent most of its CPU below httpx, in httpcore, h11 and anyio
(connection pool bookkeeping, h11's pure-Python parsing, anyio's cancel scopes and task
lookups): about 0.57 ms per call at 64 in flight, against 0.14 for an aiohttp harness
sending the same requests. This transport keeps httpx's ``Request`` and ``Response`` and
its client, and does the rest with an ``asyncio.Protocol`` per connection and
httptools' parser (llhttp, in C; uvicorn's): 0.27 ms per call, and 1,280-1,310 →
1,838-1,856 calls/s end to end in the benchmark's stack.

Only for what it is built for: plain HTTP/1.1 to the API, with keep-alive, request
bodies sent whole and responses read whole (the calls' small JSON). The client keeps
httpx's own transport for HTTPS, for a proxy from the environment, and for streamed
responses (``fast_transport_for`` decides). Nothing is retried: a request that fails
on the wire is an ``httpx`` error, which the client answers as ``unavailable``, as
before. A connection the server has closed while idle (uvicorn closes them after 5 s)
is noticed by the event loop and never reused, and none is reused after
``wire.KEEPALIVE_EXPIRY_S`` (2 s) idle, so a request never meets that close.

``SyncFastTransport`` is the same for the blocking ``Client``, on blocking sockets: a
lone waited call's latency includes all of the client's own CPU, and httpx's transport
(httpcore, h11) spent about 1 ms of it per call. A kept connection is checked with one
``poll`` before reuse, as httpcore does: a server that closed it has made it readable.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httptools
import httpx

from .http_backend import is_readable
from .wire import KEEPALIVE_EXPIRY_S

# At most this many connections per client (what its httpx pools allowed in all).
MAX_CONNECTIONS = 200
# What one blocking read asks for: the calls' answers are small.
READ_BYTES = 65536


class _ResponseReader:
    """httptools' callbacks for one response at a time on one connection."""

    def __init__(self, on_complete: Callable[[], None] | None = None) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._on_complete = on_complete
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.headers_complete = False
        self.complete = False
        # Read from the parser in its callbacks: once the message is complete it has
        # reset for the next one (``should_keep_alive`` is then False).
        self.status = 0
        self.keep_alive = False

    def expect(self) -> None:
        """Ready for the next response."""
        self.headers, self.body = [], []
        self.headers_complete = self.complete = self.keep_alive = False

    def feed(self, data: bytes) -> None:
        """Parse ``data``; a malformed response is an ``httpx.RemoteProtocolError``."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise httpx.RemoteProtocolError(f"malformed response: {exc}") from None

    def ended_by_close(self) -> bool:
        """The server closed the connection: True if that ended the body (one with neither
        a length nor chunks); False if the response was cut short."""
        if self.complete:
            return True
        names = {name.lower() for name, _ in self.headers}
        return self.headers_complete and not (
            b"content-length" in names or b"transfer-encoding" in names
        )

    def response(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return self.status, self.headers, b"".join(self.body)

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.headers_complete = True
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self._parser.should_keep_alive()
        self.complete = True
        if self._on_complete is not None:
            self._on_complete()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request at a time, its response parsed as it comes."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._reader = _ResponseReader(on_complete=self._completed)
        self._done: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._reader.feed(data)
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)  # nothing if the response was complete before the bad bytes
            self.close()

    def _completed(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is not None and not self._done.done():
            if self._reader.ended_by_close():
                self._done.set_result(None)
            else:
                self._fail(httpx.RemoteProtocolError("the server closed the connection"))

    # -- use -------------------------------------------------------------------------

    async def exchange(
        self, data: bytes, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send ``data`` (a whole request); the response's status, headers and body."""
        if self.closed or self.transport is None:
            raise httpx.RemoteProtocolError("the server closed the connection")
        self._reader.expect()
        self._done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        async with asyncio.timeout(read_timeout):
            await self._done
        return self._reader.response()

    def reusable(self) -> bool:
        return not self.closed and self._reader.keep_alive

    def usable_again(self) -> bool:
        return not self.closed  # the event loop has seen any close by the server

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_exception(error)


class FastTransport(httpx.AsyncBaseTransport):
    """Keep-alive connections to one API, at most ``max_connections`` at once."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._open = 0
        self._max = max_connections
        self._free: asyncio.Condition | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        data = _request_bytes(request, await request.aread())
        with _mapped_errors(request):
            connection = await self._connection(
                request, timeouts.get("pool"), timeouts.get("connect")
            )
            try:
                status, headers, content = await connection.exchange(data, timeouts.get("read"))
            except BaseException:
                connection.close()  # a response may still come: the connection is spoilt
                await self._release(request, connection)
                raise
            await self._release(request, connection)
        return httpx.Response(
            status, headers=headers, content=content, extensions={"http_version": b"HTTP/1.1"}
        )

    async def aclose(self) -> None:
        for connections in self._idle.values():
            self._open -= _close_all(connections)

    async def _connection(
        self, request: httpx.Request, pool_timeout: float | None, connect_timeout: float | None
    ) -> _Connection:
        origin = _origin(request.url)
        idle = self._idle.setdefault(origin, [])
        connection = self._take(idle)
        if connection is not None:
            return connection
        if self._free is None:
            self._free = asyncio.Condition()
        async with self._free:
            async with asyncio.timeout(pool_timeout):
                await self._free.wait_for(lambda: self._open < self._max or bool(idle))
            connection = self._take(idle)
            if connection is not None:
                return connection
            self._open += 1
        try:
            async with asyncio.timeout(connect_timeout):
                _, connection = await asyncio.get_running_loop().create_connection(
                    _Connection, origin[0], origin[1]
                )
        except BaseException:
            await self._released_one()
            raise
        return connection

    def _take(self, idle: list[_Connection]) -> _Connection | None:
        connection, dropped = _take_idle(idle)
        self._open -= dropped
        return connection

    async def _release(self, request: httpx.Request, connection: _Connection) -> None:
        if connection.reusable():
            connection.idle_since = time.monotonic()
            self._idle.setdefault(_origin(request.url), []).append(connection)
            if self._free is not None:
                async with self._free:
                    self._free.notify()
            return
        connection.close()
        await self._released_one()

    async def _released_one(self) -> None:
        self._open -= 1
        if self._free is not None:
            async with self._free:
                self._free.notify()


class _SyncConnection:
    """One keep-alive connection on a blocking socket: a request at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False
        self.idle_since = 0.0
        self._reader = _ResponseReader()

    def exchange(
        self, data: bytes, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send ``data`` (a whole request); the response's status, headers and body."""
        self._reader.expect()
        self.sock.settimeout(read_timeout)
        self.sock.sendall(data)
        while not self._reader.complete:
            chunk = self.sock.recv(READ_BYTES)
            if not chunk:
                self.closed = True
                if self._reader.ended_by_close():
                    break
                raise httpx.RemoteProtocolError("the server closed the connection")
            self._reader.feed(chunk)
        return self._reader.response()

    def reusable(self) -> bool:
        return not self.closed and self._reader.keep_alive

    def usable_again(self) -> bool:
        """Whether a kept connection can take the next request: nothing may be waiting on
        it, so a readable one was closed by the server (or sent what nobody asked for)."""
        return not self.closed and not is_readable(self.sock)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class SyncFastTransport(httpx.BaseTransport):
    """``FastTransport`` for the blocking client; safe to share between threads."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self._idle: dict[tuple[str, int], list[_SyncConnection]] = {}
        self._open = 0
        self._max = max_connections
        self._free = threading.Condition()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        data = _request_bytes(request, request.read())
        with _mapped_errors(request):
            connection = self._connection(request, timeouts.get("pool"), timeouts.get("connect"))
            try:
                status, headers, content = connection.exchange(data, timeouts.get("read"))
            except BaseException:
                connection.close()  # a response may still come: the connection is spoilt
                self._release(request, connection)
                raise
            self._release(request, connection)
        return httpx.Response(
            status, headers=headers, content=content, extensions={"http_version": b"HTTP/1.1"}
        )

    def close(self) -> None:
        """Close the idle connections; those in use are closed when their request ends."""
        with self._free:
            self._closed = True
            for connections in self._idle.values():
                self._open -= _close_all(connections)
            self._free.notify_all()

    def _connection(
        self, request: httpx.Request, pool_timeout: float | None, connect_timeout: float | None
    ) -> _SyncConnection:
        deadline = None if pool_timeout is None else time.monotonic() + pool_timeout
        with self._free:
            idle = self._idle.setdefault(_origin(request.url), [])
            while True:
                connection, dropped = _take_idle(idle)
                self._open -= dropped
                if connection is not None:
                    return connection
                if self._open < self._max:
                    self._open += 1
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if (left is not None and left <= 0) or not self._free.wait(left):
                    raise httpx.PoolTimeout("no connection free in time", request=request)
        try:
            sock = socket.create_connection(_origin(request.url), timeout=connect_timeout)
        except BaseException:
            self._release(request, None)
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # only a latency matter
        return _SyncConnection(sock)

    def _release(self, request: httpx.Request, connection: _SyncConnection | None) -> None:
        with self._free:
            if connection is not None and connection.reusable() and not self._closed:
                connection.idle_since = time.monotonic()
                self._idle.setdefault(_origin(request.url), []).append(connection)
            else:
                if connection is not None:
                    connection.close()
                self._open -= 1
            self._free.notify()


_Kept = TypeVar("_Kept", _Connection, _SyncConnection)


def _take_idle(idle: list[_Kept]) -> tuple[_Kept | None, int]:
    """The most recently used connection of ``idle`` that can take a request, and how many
    were closed on the way: those kept longer than ``KEEPALIVE_EXPIRY_S`` (the oldest,
    at the front), so none is used as the server closes it after its own keep-alive
    timeout (uvicorn's is 5 s), and those the server has closed already."""
    now, dropped = time.monotonic(), 0
    while idle and now - idle[0].idle_since > KEEPALIVE_EXPIRY_S:
        idle.pop(0).close()
        dropped += 1
    while idle:
        connection = idle.pop()
        if connection.usable_again():
            return connection, dropped
        connection.close()
        dropped += 1
    return None, dropped


def _close_all(connections: list[_Kept]) -> int:
    """Close and forget ``connections``; how many there were."""
    count = len(connections)
    while connections:
        connections.pop().close()
    return count


@contextmanager
def _mapped_errors(request: httpx.Request) -> Iterator[None]:
    """What went wrong on the wire, as the ``httpx`` error httpx's transport raises."""
    try:
        yield
    except TimeoutError:
        raise httpx.TimeoutException("timed out", request=request) from None
    except httpx.HTTPError as exc:
        exc.request = request
        raise
    except OSError as exc:
        raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None


def _request_bytes(request: httpx.Request, body: bytes) -> bytes:
    """The whole request as it goes on the wire, head and body in one piece."""
    head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    head += [b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw]
    head.append(b"\r\n")
    return b"".join(head) + body


def _origin(url: httpx.URL) -> tuple[str, int]:
    return url.host, url.port or 80


def _direct(base_url: str) -> bool:
    """Whether ``base_url`` is plain HTTP that no proxy from the environment applies to
    (httpx's own transport honours those; these do not)."""
    url = httpx.URL(base_url)
    if url.scheme != "http":
        return False
    proxies = urllib.request.getproxies()
    return not (
        ("http" in proxies or "all" in proxies) and not urllib.request.proxy_bypass(url.host)
    )


def fast_transport_for(base_url: str) -> FastTransport | None:
    """A ``FastTransport`` for ``base_url`` if it is plain HTTP with no proxy in the way."""
    return FastTransport() if _direct(base_url) else None


def sync_fast_transport_for(base_url: str) -> SyncFastTransport | None:
    """A ``SyncFastTransport`` for ``base_url`` if it is plain HTTP with no proxy in the way."""
    return SyncFastTransport() if _direct(base_url) else None
