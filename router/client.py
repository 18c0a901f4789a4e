"""The Python client, for agents and approvers: ``Client`` (blocking) and ``AsyncClient``.

Both speak the HTTP API over pooled ``httpx`` connections (``AsyncClient`` in several
small pools, see ``_PoolShards``), and send their calls through ``router.fast_transport``
when they can. Answers about a call are ``CallResult`` values, as the
server gives them (SPEC §4): a tool that failed, a call that is pending, even a service
that cannot take the call (``status="unavailable"``) is a value, never an exception. The
caller's own mistakes are exceptions from ``router.errors``: a bad key
(``NotAuthenticated``), a missing role (``Forbidden``), an unknown call, request or batch
(``NotFound``), a malformed batch (``BadRequest``, ``PayloadTooLarge``).

    with Client("http://127.0.0.1:8000", key) as client:
        result = client.call("add", {"a": 1, "b": 2}, wait_s=5)
        if result.ok:
            print(result.value)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import httpx

from . import wire
from .errors import Unavailable
from .fast_transport import fast_transport_for, sync_fast_transport_for
from .http_backend import keep_sockets, send_in_one_piece
from .results import CallResult, unavailable
from .wire import BATCH_TIMEOUT_S, BatchReceipt, BatchStatus, Decided

__all__ = ["AsyncClient", "BatchReceipt", "BatchStatus", "Client", "Decided"]

_Http = TypeVar("_Http", httpx.Client, httpx.AsyncClient)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_WAIT_S = 30.0
# The HTTP timeout is the server-side wait plus this.
TIMEOUT_MARGIN_S = 30.0


def _http_options(base_url: str, key: str, timeout: float, limits: httpx.Limits) -> dict[str, Any]:
    """What both clients give httpx: the API, the key, and one TLS context per process."""
    return {
        "base_url": base_url,
        "headers": wire.auth_headers(key),
        "timeout": timeout,
        "limits": limits,
        "verify": wire.tls_context(),
    }


class _NoCookiePass(httpx.Cookies):
    """httpx runs every response through a cookie jar, building a ``urllib`` request and
    response to do it: about a tenth of ``Client.call``'s CPU in the profile. The API
    sets no cookies, so only a response that sets one goes through the jar."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


def _without_cookie_pass(http: _Http) -> _Http:
    # ``httpx.Client(cookies=...)`` copies any jar into a plain ``Cookies``, so ours is set
    # where httpx reads it (private to httpx; if it is renamed, httpx's own pass stays).
    if isinstance(getattr(http, "_cookies", None), httpx.Cookies):
        http._cookies = _NoCookiePass()
    return http


def _fast_client(
    http_class: type[_Http],
    base_url: str,
    key: str,
    timeout: float,
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport,
) -> _Http:
    """The httpx client the calls go through when a ``router.fast_transport`` applies."""
    return _without_cookie_pass(
        http_class(
            base_url=base_url,
            headers=wire.auth_headers(key),
            timeout=timeout,
            transport=transport,  # type: ignore[arg-type]
        )
    )


def endpoint(base_url: str, path: str) -> httpx.URL:
    """``path`` under ``base_url``, joined as httpx joins a path to its ``base_url``, but
    parsed once: httpx parses and joins a path given as text on every request (a tenth
    of ``Client.call``'s CPU), not one given as a ``URL``."""
    base = httpx.URL(base_url)
    prefix = base.raw_path if base.raw_path.endswith(b"/") else base.raw_path + b"/"
    return base.copy_with(raw_path=prefix + path.lstrip("/").encode("ascii"))


class Client:
    """A blocking client; use it as a context manager or close it.

    Calls (``call``, ``submit``, ``result``, ``cancel``) go through ``SyncFastTransport``
    when the API is plain HTTP with no proxy in the way (``router.fast_transport``);
    everything else, and calls over HTTPS or a proxy, through httpx's own transport. Both
    may be used from several threads at once."""

    def __init__(self, base_url: str = DEFAULT_URL, key: str = "", *, timeout: float = 60.0):
        self._http = _without_cookie_pass(
            send_in_one_piece(httpx.Client(**_http_options(base_url, key, timeout, wire.LIMITS)))
        )
        fast = sync_fast_transport_for(base_url)
        self._fast = (
            None if fast is None else _fast_client(httpx.Client, base_url, key, timeout, fast)
        )
        self._calls_url = endpoint(base_url, "/v1/calls")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()
        if self._fast is not None:
            self._fast.close()

    def _call_request(
        self, method: str, path: str | httpx.URL, wait_s: float, **kw: Any
    ) -> CallResult:
        http = self._fast or self._http
        try:
            response = http.request(method, path, timeout=wait_s + TIMEOUT_MARGIN_S, **kw)
        except httpx.HTTPError as exc:
            return unavailable(f"cannot reach the API: {exc}")
        return wire.call_answer(response)

    def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the API: {exc}") from None
        return wire.checked(response)

    # -- agents ----------------------------------------------------------------------

    def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call and wait up to ``wait_s`` for its outcome."""
        body = wire.call_body(tool, args, wait_s, idempotency_key)
        return self._call_request("POST", self._calls_url, wait_s, json=body)

    def submit(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call without waiting: ``queued``, ``pending`` or ``rejected``."""
        return self.call(tool, args, wait_s=0.0, idempotency_key=idempotency_key)

    def result(self, call_id: str, *, wait_s: float = 0.0) -> CallResult:
        """A call's result; with ``wait_s``, once it finished or when the wait runs out."""
        params = {"wait_s": str(wait_s)} if wait_s else {}
        return self._call_request("GET", f"/v1/calls/{call_id}", wait_s, params=params)

    def cancel(self, call_id: str) -> CallResult:
        """Cancel one of your calls while it is queued or pending."""
        return self._call_request("DELETE", f"/v1/calls/{call_id}", 0.0)

    def batch(
        self,
        calls: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        offset: int | None = None,
    ) -> BatchReceipt:
        """Submit calls (``{"tool", "args", "idempotency_key"?}`` each) as one batch."""
        body = wire.batch_body(calls, idempotency_key)
        return wire.receipt(
            self._request(
                "POST",
                "/v1/batches",
                json=body,
                params=wire.offset_params(offset),
                timeout=BATCH_TIMEOUT_S,
            )
        )

    def batch_lines(
        self, lines: Iterable[str], *, idempotency_key: str | None = None, offset: int | None = None
    ) -> BatchReceipt:
        """Submit NDJSON lines as they are: a line that is not JSON is rejected at its index."""
        return wire.receipt(
            self._request(
                "POST", "/v1/batches", **wire.ndjson_request(lines, idempotency_key, offset)
            )
        )

    def batch_status(self, batch_id: str) -> BatchStatus:
        return wire.batch_status(self._request("GET", f"/v1/batches/{batch_id}"))

    def batch_results(self, batch_id: str) -> Iterator[tuple[int, CallResult]]:
        """``(index, result)`` for every call of the batch, in batch order, streamed."""
        with self._http.stream(
            "GET", f"/v1/batches/{batch_id}/results", timeout=BATCH_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                response.read()
                wire.raise_for(response, wire.body_of(response))
            for line in response.iter_lines():
                item = wire.result_line(line)
                if item is not None:
                    yield item

    # -- approvers -------------------------------------------------------------------

    def approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        """Requests this key may decide (operators: all)."""
        return list(self._request("GET", "/v1/approvals", params={"status": status})["requests"])

    def approve(
        self, request_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> Decided:
        """Approve; with ``wait_s``, also wait for the released call's outcome."""
        return wire.decided(
            self._request(
                "POST",
                f"/v1/approvals/{request_id}/approve",
                json=wire.decision_body(reason, wait_s),
                timeout=(wait_s or 0.0) + TIMEOUT_MARGIN_S,
            )
        )

    def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return wire.decided(
            self._request(
                "POST", f"/v1/approvals/{request_id}/deny", json=wire.decision_body(reason, None)
            )
        )


class AsyncClient:
    """The same as ``Client``, for asyncio: ``async with AsyncClient(url, key) as client``.

    Calls (``call``, ``submit``, ``result``, ``cancel``) go through ``FastTransport``
    when the API is plain HTTP with no proxy in the way (``router.fast_transport``);
    everything else, and calls over HTTPS or a proxy, through httpx's own transport."""

    def __init__(self, base_url: str = DEFAULT_URL, key: str = "", *, timeout: float = 60.0):
        self._pools = _PoolShards(
            lambda: _without_cookie_pass(
                keep_sockets(
                    httpx.AsyncClient(**_http_options(base_url, key, timeout, wire.SHARD_LIMITS))
                )
            )
        )
        fast = fast_transport_for(base_url)
        self._fast = (
            None if fast is None else _fast_client(httpx.AsyncClient, base_url, key, timeout, fast)
        )
        self._calls_url = endpoint(base_url, "/v1/calls")

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pools.aclose()
        if self._fast is not None:
            await self._fast.aclose()

    async def _call_request(
        self, method: str, path: str | httpx.URL, wait_s: float, **kw: Any
    ) -> CallResult:
        timeout = wait_s + TIMEOUT_MARGIN_S
        try:
            if self._fast is not None:
                response = await self._fast.request(method, path, timeout=timeout, **kw)
            else:
                with self._pools.lease() as http:
                    response = await http.request(method, path, timeout=timeout, **kw)
        except httpx.HTTPError as exc:
            return unavailable(f"cannot reach the API: {exc}")
        return wire.call_answer(response)

    async def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            with self._pools.lease() as http:
                response = await http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the API: {exc}") from None
        return wire.checked(response)

    async def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
    ) -> CallResult:
        body = wire.call_body(tool, args, wait_s, idempotency_key)
        return await self._call_request("POST", self._calls_url, wait_s, json=body)

    async def submit(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> CallResult:
        return await self.call(tool, args, wait_s=0.0, idempotency_key=idempotency_key)

    async def result(self, call_id: str, *, wait_s: float = 0.0) -> CallResult:
        params = {"wait_s": str(wait_s)} if wait_s else {}
        return await self._call_request("GET", f"/v1/calls/{call_id}", wait_s, params=params)

    async def cancel(self, call_id: str) -> CallResult:
        return await self._call_request("DELETE", f"/v1/calls/{call_id}", 0.0)

    async def batch(
        self,
        calls: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        offset: int | None = None,
    ) -> BatchReceipt:
        body = wire.batch_body(calls, idempotency_key)
        return wire.receipt(
            await self._request(
                "POST",
                "/v1/batches",
                json=body,
                params=wire.offset_params(offset),
                timeout=BATCH_TIMEOUT_S,
            )
        )

    async def batch_lines(
        self, lines: Iterable[str], *, idempotency_key: str | None = None, offset: int | None = None
    ) -> BatchReceipt:
        return wire.receipt(
            await self._request(
                "POST", "/v1/batches", **wire.ndjson_request(lines, idempotency_key, offset)
            )
        )

    async def batch_status(self, batch_id: str) -> BatchStatus:
        return wire.batch_status(await self._request("GET", f"/v1/batches/{batch_id}"))

    async def batch_results(self, batch_id: str) -> AsyncIterator[tuple[int, CallResult]]:
        with self._pools.lease() as http:
            async for item in self._stream_results(http, batch_id):
                yield item

    @staticmethod
    async def _stream_results(
        http: httpx.AsyncClient, batch_id: str
    ) -> AsyncIterator[tuple[int, CallResult]]:
        async with http.stream(
            "GET", f"/v1/batches/{batch_id}/results", timeout=BATCH_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                await response.aread()
                wire.raise_for(response, wire.body_of(response))
            async for line in response.aiter_lines():
                item = wire.result_line(line)
                if item is not None:
                    yield item

    async def approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        body = await self._request("GET", "/v1/approvals", params={"status": status})
        return list(body["requests"])

    async def approve(
        self, request_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> Decided:
        return wire.decided(
            await self._request(
                "POST",
                f"/v1/approvals/{request_id}/approve",
                json=wire.decision_body(reason, wait_s),
                timeout=(wait_s or 0.0) + TIMEOUT_MARGIN_S,
            )
        )

    async def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return wire.decided(
            await self._request(
                "POST", f"/v1/approvals/{request_id}/deny", json=wire.decision_body(reason, None)
            )
        )


class _PoolShards:
    """The async client's connections, in several small ``httpx`` pools instead of one.

    httpcore's pool walks its whole connection list once per idle connection every time a
    request starts or ends, which is quadratic in the connections: with 64 calls in flight
    that cost 6 ms of CPU per call in the benchmark's profile, more than the server spent
    on the call. Pools of ``SHARD_CONNECTIONS`` keep each walk short; a request goes to
    the pool with the fewest requests in flight, and a new pool opens only when all are
    full (so one request at a time uses one pool and one connection, as before).
    """

    def __init__(self, make: Any) -> None:
        self._make = make
        self._pools: list[httpx.AsyncClient] = []
        self._busy: list[int] = []

    @contextlib.contextmanager
    def lease(self) -> Iterator[httpx.AsyncClient]:
        index = min(range(len(self._busy)), key=self._busy.__getitem__, default=-1)
        full = index < 0 or self._busy[index] >= wire.SHARD_CONNECTIONS
        if full and len(self._pools) < wire.MAX_SHARDS:
            self._pools.append(self._make())
            self._busy.append(0)
            index = len(self._pools) - 1
        self._busy[index] += 1
        try:
            yield self._pools[index]
        finally:
            self._busy[index] -= 1

    async def aclose(self) -> None:
        pools, self._pools, self._busy = self._pools, [], []
        for pool in pools:
            await pool.aclose()
