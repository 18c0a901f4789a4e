"""The async client's transport for its calls: httpx's API over asyncio and httptools.

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
is noticed by the event loop and never reused.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import httptools
import httpx

# At most this many connections per client (what its httpx pools allowed in all).
MAX_CONNECTIONS = 200


class _Connection(asyncio.Protocol):
    """One keep-alive connection: a request at a time, its response parsed as it comes."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._done: asyncio.Future[None] | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._headers_complete = False
        # Read from the parser in its callbacks: once the message is complete it has
        # reset for the next one (``should_keep_alive`` is then False).
        self._status = 0
        self._keep_alive = False

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is not None and not self._done.done():
            if self._headers_complete and not self._framed():
                self._done.set_result(None)  # a body delimited by the close
            else:
                self._fail(httpx.RemoteProtocolError("the server closed the connection"))

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_complete = True
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # -- use -------------------------------------------------------------------------

    async def exchange(
        self, data: bytes, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send ``data`` (a whole request); the response's status, headers and body."""
        if self.closed or self.transport is None:
            raise httpx.RemoteProtocolError("the server closed the connection")
        self._headers, self._body, self._headers_complete = [], [], False
        self._keep_alive = False
        self._done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        async with asyncio.timeout(read_timeout):
            await self._done
        return self._status, self._headers, b"".join(self._body)

    def reusable(self) -> bool:
        return not self.closed and self._keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _framed(self) -> bool:
        names = {name.lower() for name, _ in self._headers}
        return b"content-length" in names or b"transfer-encoding" in names

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
        body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
        head += [b"%s: %s\r\n" % (name, value) for name, value in request.headers.raw]
        head.append(b"\r\n")
        with self._mapped_errors(request):
            connection = await self._connection(
                request, timeouts.get("pool"), timeouts.get("connect")
            )
            try:
                status, headers, content = await connection.exchange(
                    b"".join(head) + body, timeouts.get("read")
                )
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
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def _connection(
        self, request: httpx.Request, pool_timeout: float | None, connect_timeout: float | None
    ) -> _Connection:
        origin = _origin(request.url)
        idle = self._idle.setdefault(origin, [])
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
            self._open -= 1
        if self._free is None:
            self._free = asyncio.Condition()
        async with self._free:
            async with asyncio.timeout(pool_timeout):
                await self._free.wait_for(lambda: self._open < self._max or bool(idle))
            if idle:
                return idle.pop()
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

    async def _release(self, request: httpx.Request, connection: _Connection) -> None:
        if connection.reusable():
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

    @staticmethod
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


def _origin(url: httpx.URL) -> tuple[str, int]:
    return url.host, url.port or 80


def fast_transport_for(base_url: str) -> FastTransport | None:
    """A ``FastTransport`` for ``base_url`` if it is plain HTTP that no proxy from the
    environment applies to (httpx's own transport honours those; this one does not)."""
    url = httpx.URL(base_url)
    if url.scheme != "http":
        return None
    proxies = urllib.request.getproxies()
    if ("http" in proxies or "all" in proxies) and not urllib.request.proxy_bypass(url.host):
        return None
    return FastTransport()
