"""``Client``: the blocking Python client, on urllib3's connection pool.

with Client("http://127.0.0.1:8000", key) as client:
    result = client.call("add", {"a": 1, "b": 2}, wait_s=5)
    if result.ok:
        print(result.value)
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError
from urllib3.response import BaseHTTPResponse, HTTPResponse

from ..errors import Unavailable
from ..results import CallResult, unavailable
from . import answers, api_requests
from .answers import BatchReceipt, BatchStatus, Decided, Routed


class Client:
    """A blocking client for agents and approvers; use it as a context manager or close it.

    Answers about a call are ``CallResult`` values, as the server gives them (SPEC §4): a
    tool that failed, a call that is pending, even a service that cannot take the call
    (``status="unavailable"``) is a value, never an exception. The caller's own mistakes
    are exceptions from ``router.errors``: a bad key (``NotAuthenticated``), a missing role
    (``Forbidden``), an unknown call, request or batch (``NotFound``), a malformed batch
    (``BadRequest``, ``PayloadTooLarge``). Safe to use from several threads at once."""

    def __init__(
        self,
        base_url: str = api_requests.DEFAULT_URL,
        key: str = "",
        *,
        timeout: float = api_requests.DEFAULT_TIMEOUT_S,
    ):
        self._api = api_requests.Api(base_url, key, timeout)
        self._http = _pool_manager(self._api)
        # Without a proxy every request goes to one host: its pool is taken once, and a
        # request names only its path, where the manager would parse each URL and look
        # the pool up again on every request.
        self._pool: urllib3.HTTPConnectionPool | None = None
        self._origin = 0  # the length of ``scheme://host:port``, which every URL starts with
        if self._api.proxy is None:
            self._pool = self._http.connection_from_url(base_url)
            parts = urllib.parse.urlsplit(base_url)
            self._origin = len(parts.scheme) + len("://") + len(parts.netloc)
        self._closed = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections; one in use closes when its request ends."""
        self._closed = True
        self._http.clear()  # urllib3 closes a pool's connections once the pool is collected
        if self._pool is not None:
            self._pool.close()  # this one is held here, so it is closed now

    def _send(self, request: api_requests.Request, *, stream: bool = False) -> BaseHTTPResponse:
        if self._closed:
            raise RuntimeError("the client is closed")
        options: dict[str, Any] = {
            "body": request.body,
            "headers": _wire_headers(request.headers),
            "timeout": request.timeout,  # to connect, and for each wait for the server
            "pool_timeout": request.timeout,  # a float, whatever urllib3's hint says
            "retries": False,  # nothing is sent twice
            "redirect": False,  # a redirect comes back as an answer, as from ``AsyncClient``
            "preload_content": not stream,
        }
        if self._pool is not None:
            return self._pool.urlopen(request.method, request.url[self._origin :], **options)
        return self._http.urlopen(request.method, request.url, **options)

    def _call(self, request: api_requests.Request) -> CallResult:
        try:
            response = self._send(request)
        except HTTPError as exc:
            return unavailable(answers.unreachable(exc))
        return answers.call_answer(response.status, response.data)

    def _checked(self, request: api_requests.Request) -> dict[str, Any]:
        try:
            response = self._send(request)
        except HTTPError as exc:
            raise Unavailable(answers.unreachable(exc)) from None
        return answers.checked(response.status, response.data)

    # -- agents ----------------------------------------------------------------------

    def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        wait_s: float = api_requests.DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call and wait up to ``wait_s`` for its outcome."""
        return self._call(self._api.call(tool, args, wait_s, idempotency_key))

    def submit(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> CallResult:
        """Submit a call without waiting: ``queued``, ``pending`` or ``rejected``."""
        return self.call(tool, args, wait_s=0.0, idempotency_key=idempotency_key)

    def explain(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """What submitting this call would do (``"dry_run": true``), with nothing submitted:
        the explanation as the API answers it (see the HTTP reference, ``DryRun``). A
        refusal is in its ``refused``; a malformed request raises, as for a batch."""
        return self._checked(self._api.explain(tool, args, idempotency_key))

    def route(
        self,
        task: str,
        *,
        strategy: str | None = None,
        capability: str | None = None,
        limit: int = 10,
    ) -> Routed:
        """Tools for ``task``, best first, each with a score and a reason (``POST /v1/route``).
        ``strategy`` unset: the server's default; ``capability`` keeps the tools declaring it."""
        return answers.routed(self._checked(self._api.route(task, strategy, capability, limit)))

    def result(self, call_id: str, *, wait_s: float = 0.0) -> CallResult:
        """A call's result; with ``wait_s``, once it finished or when the wait runs out."""
        return self._call(self._api.result(call_id, wait_s))

    def cancel(self, call_id: str) -> CallResult:
        """Cancel one of your calls while it is queued or pending."""
        return self._call(self._api.cancel(call_id))

    def batch(
        self,
        calls: Iterable[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        offset: int | None = None,
    ) -> BatchReceipt:
        """Submit calls (``{"tool", "args", "idempotency_key"?}`` each) as one batch."""
        return answers.receipt(self._checked(self._api.batch(calls, idempotency_key, offset)))

    def batch_lines(
        self, lines: Iterable[str], *, idempotency_key: str | None = None, offset: int | None = None
    ) -> BatchReceipt:
        """Submit NDJSON lines as they are: a line that is not JSON is rejected at its index."""
        request = self._api.batch_lines(lines, idempotency_key, offset)
        return answers.receipt(self._checked(request))

    def batch_status(self, batch_id: str) -> BatchStatus:
        return answers.batch_status(self._checked(self._api.batch_status(batch_id)))

    def batch_results(self, batch_id: str) -> Iterator[tuple[int, CallResult]]:
        """``(index, result)`` for every call of the batch, in batch order, streamed."""
        try:
            response = self._send(self._api.batch_results(batch_id), stream=True)
        except HTTPError as exc:
            raise Unavailable(answers.unreachable(exc)) from None
        try:
            if response.status != 200:
                answers.raise_for(response.status, answers.json_of(response.data))
            for line in response:
                item = answers.result_line(line)
                if item is not None:
                    yield item
        except HTTPError as exc:
            raise Unavailable(answers.unreachable(exc)) from None
        finally:
            # Left before the end, the connection still holds the rest: closed, not reused.
            response.close()
            response.release_conn()

    # -- approvers -------------------------------------------------------------------

    def approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        """Requests this key may read: those it may decide (operators: all)."""
        return answers.approval_requests(self._checked(self._api.approvals(status)))

    def approve(
        self, request_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> Decided:
        """Approve; with ``wait_s``, also wait for the released call's outcome."""
        return answers.decided(
            self._checked(self._api.approve(request_id, reason, wait_s)), request_id
        )

    def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return answers.decided(self._checked(self._api.deny(request_id, reason)), request_id)


class _Connection(HTTPConnection):
    """A connection that counts as dropped once idle past ``api_requests.KEEPALIVE_EXPIRY_S``, so
    the pool opens a new one rather than race the server's keep-alive close."""

    answered_at = 0.0

    def getresponse(self) -> HTTPResponse:  # type: ignore[override]
        response = super().getresponse()
        self.answered_at = time.monotonic()
        return response

    @property
    def is_connected(self) -> bool:
        fresh = time.monotonic() - self.answered_at < api_requests.KEEPALIVE_EXPIRY_S
        return fresh and super().is_connected


class _TLSConnection(_Connection, HTTPSConnection):
    pass


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


def _pool_manager(api: api_requests.Api) -> urllib3.PoolManager:
    """Pools of ``api_requests.MAX_CONNECTIONS`` kept-alive connections, a request waiting for one
    when all are busy; through the environment's proxy if it names one for the API."""
    options: dict[str, Any] = {"maxsize": api_requests.MAX_CONNECTIONS, "block": True}
    if api.tls is not None:
        options["ssl_context"] = api.tls
    manager: urllib3.PoolManager
    if api.proxy is None:
        manager = urllib3.PoolManager(**options)
    else:
        auth = urllib3.util.parse_url(api.proxy).auth
        headers = urllib3.make_headers(proxy_basic_auth=auth) if auth else None
        manager = urllib3.ProxyManager(api.proxy, proxy_headers=headers, **options)
    manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
    return manager


def _wire_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` as ``http.client`` writes them, in Latin-1: a value beyond ASCII (an
    idempotency key) goes as its UTF-8 bytes, as the API reads it and ``aiohttp`` sends it."""
    if all(value.isascii() for value in headers.values()):
        return headers
    return {name: value.encode("utf-8").decode("latin-1") for name, value in headers.items()}
