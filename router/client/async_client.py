"""``AsyncClient``: the Python client for asyncio, on one aiohttp session.

async with AsyncClient("http://127.0.0.1:8000", key) as client:
    results = await asyncio.gather(*(client.call("add", {"a": i, "b": 1}) for i in range(10)))
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import yarl

from ..errors import Unavailable
from ..results import CallResult, unavailable
from . import answers, api_requests
from .answers import BatchReceipt, BatchStatus, Decided, Routed

# What a failed request raises: aiohttp's errors, and the timeouts it leaves as they are.
_FAILED = (aiohttp.ClientError, TimeoutError)


class AsyncClient:
    """The same as ``Client``, for asyncio: ``async with AsyncClient(url, key) as client``.

    Its calls may run in many tasks at once; they share one pool of kept-alive
    connections, up to ``api_requests.MAX_CONNECTIONS`` in flight."""

    def __init__(
        self,
        base_url: str = api_requests.DEFAULT_URL,
        key: str = "",
        *,
        timeout: float = api_requests.DEFAULT_TIMEOUT_S,
    ):
        self._api = api_requests.Api(base_url, key, timeout)
        # Made at the first request: an aiohttp session belongs to the running event loop.
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            if self._closed:
                raise RuntimeError("the client is closed")
            connector = aiohttp.TCPConnector(
                limit=api_requests.MAX_CONNECTIONS,
                keepalive_timeout=api_requests.KEEPALIVE_EXPIRY_S,
                ssl=self._api.tls or True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # the API sets no cookies
            )
        return self._session

    def _open(
        self, request: api_requests.Request
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """The request sent: ``async with`` it for the response."""
        return self._http().request(
            request.method,
            yarl.URL(request.url, encoded=True),
            data=request.body,
            headers=request.headers,
            timeout=_timeout(request.timeout),
            allow_redirects=False,  # a redirect comes back as an answer, as from ``Client``
            proxy=self._api.proxy,
        )

    async def _send(self, request: api_requests.Request) -> tuple[int, bytes]:
        async with self._open(request) as response:
            return response.status, await response.read()

    async def _call(self, request: api_requests.Request) -> CallResult:
        try:
            status, body = await self._send(request)
        except _FAILED as exc:
            return unavailable(answers.unreachable(exc))
        return answers.call_answer(status, body)

    async def _checked(self, request: api_requests.Request) -> dict[str, Any]:
        try:
            status, body = await self._send(request)
        except _FAILED as exc:
            raise Unavailable(answers.unreachable(exc)) from None
        return answers.checked(status, body)

    # -- agents ----------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        wait_s: float = api_requests.DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call and wait up to ``wait_s`` for its outcome."""
        return await self._call(self._api.call(tool, args, wait_s, idempotency_key))

    async def submit(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call without waiting: ``queued``, ``pending`` or ``rejected``."""
        return await self.call(tool, args, wait_s=0.0, idempotency_key=idempotency_key)

    async def explain(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """What submitting this call would do (``"dry_run": true``), with nothing submitted:
        the explanation as the API answers it (see the HTTP reference, ``DryRun``). A
        refusal is in its ``refused``; a malformed request raises, as for a batch."""
        return await self._checked(self._api.explain(tool, args, idempotency_key))

    async def route(
        self,
        task: str,
        *,
        strategy: str | None = None,
        capability: str | None = None,
        limit: int = 10,
    ) -> Routed:
        """Tools for ``task``, best first, each with a score and a reason (``POST /v1/route``).
        ``strategy`` unset: the server's default; ``capability`` keeps the tools declaring it."""
        request = self._api.route(task, strategy, capability, limit)
        return answers.routed(await self._checked(request))

    async def result(self, call_id: str, *, wait_s: float = 0.0) -> CallResult:
        """A call's result; with ``wait_s``, once it finished or when the wait runs out."""
        return await self._call(self._api.result(call_id, wait_s))

    async def cancel(self, call_id: str) -> CallResult:
        """Cancel one of your calls while it is queued or pending."""
        return await self._call(self._api.cancel(call_id))

    async def batch(
        self,
        calls: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        offset: int | None = None,
    ) -> BatchReceipt:
        """Submit calls (``{"tool", "args", "idempotency_key"?}`` each) as one batch."""
        request = self._api.batch(calls, idempotency_key, offset)
        return answers.receipt(await self._checked(request))

    async def batch_lines(
        self, lines: Iterable[str], *, idempotency_key: str | None = None, offset: int | None = None
    ) -> BatchReceipt:
        """Submit NDJSON lines as they are: a line that is not JSON is rejected at its index."""
        request = self._api.batch_lines(lines, idempotency_key, offset)
        return answers.receipt(await self._checked(request))

    async def batch_status(self, batch_id: str) -> BatchStatus:
        return answers.batch_status(await self._checked(self._api.batch_status(batch_id)))

    async def batch_results(self, batch_id: str) -> AsyncIterator[tuple[int, CallResult]]:
        """``(index, result)`` for every call of the batch, in batch order, streamed."""
        try:
            async with self._open(self._api.batch_results(batch_id)) as response:
                if response.status != 200:
                    body = answers.json_of(await response.read())
                    answers.raise_for(response.status, body)
                async for line in _lines(response.content):
                    item = answers.result_line(line)
                    if item is not None:
                        yield item
        except _FAILED as exc:
            raise Unavailable(answers.unreachable(exc)) from None

    # -- approvers -------------------------------------------------------------------

    async def approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        """Requests this key may read: those it may decide (operators: all)."""
        return answers.approval_requests(await self._checked(self._api.approvals(status)))

    async def approve(
        self, request_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> Decided:
        """Approve; with ``wait_s``, also wait for the released call's outcome."""
        request = self._api.approve(request_id, reason, wait_s)
        return answers.decided(await self._checked(request), request_id)

    async def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return answers.decided(await self._checked(self._api.deny(request_id, reason)), request_id)


@functools.lru_cache(maxsize=64)
def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    # Per wait, as ``Client``'s: a streamed answer may take longer in all.
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """A streamed body's lines as they arrive (aiohttp's ``readline`` caps their length)."""
    pending: list[bytes] = []
    async for piece in content.iter_any():
        if b"\n" not in piece:
            pending.append(piece)
            continue
        *lines, last = (b"".join(pending) + piece).split(b"\n")
        pending = [last] if last else []
        for line in lines:
            yield line
    if pending:
        yield b"".join(pending)
