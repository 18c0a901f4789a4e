"""The Python client, for agents and approvers: ``Client`` (blocking) and ``AsyncClient``.

Both speak the HTTP API through one pooled ``httpx`` client each. Answers about a call are
``CallResult`` values, as the server gives them (SPEC §4): a tool that failed, a call that
is pending, even a service that cannot take the call (``status="unavailable"``) is a value,
never an exception. The caller's own mistakes are exceptions from ``router.errors``: a bad
key (``NotAuthenticated``), a missing role (``Forbidden``), an unknown call, request or
batch (``NotFound``), a malformed batch (``BadRequest``, ``PayloadTooLarge``).

    with Client("http://127.0.0.1:8000", key) as client:
        result = client.call("add", {"a": 1, "b": 2}, wait_s=5)
        if result.ok:
            print(result.value)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotAuthenticated,
    NotFound,
    PayloadTooLarge,
    RequestError,
    Unavailable,
)
from .results import CallResult, unavailable

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_WAIT_S = 30.0
# The HTTP timeout is the server-side wait plus this.
TIMEOUT_MARGIN_S = 30.0
# Bulk submissions of 100,000 calls take a while to store.
BATCH_TIMEOUT_S = 600.0
_ERRORS: dict[int, type[RequestError]] = {
    401: NotAuthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: BadRequest,
}
# Answers about a call that are still values (SPEC §4); other codes raise.
_CALL_VALUE_CODES = frozenset({200, 409, 413, 422, 503})
_DECISIONS = frozenset({"approved", "denied", "cancelled"})


@dataclass(frozen=True, slots=True)
class BatchReceipt:
    """What ``POST /v1/batches`` answered: ``rejected`` holds ``(index, error)`` pairs."""

    batch_id: str
    total: int
    accepted: int
    replayed: int
    rejected: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """Counts of a batch's calls by status; ``done`` once none is queued, running or pending."""

    batch_id: str
    total: int
    counts: Mapping[str, int]
    rejected: int
    done: bool


@dataclass(frozen=True, slots=True)
class Decided:
    """An approver's decision as the approval worker took it. With ``approve(wait_s=…)`` on
    a released call, ``result`` is the call's outcome."""

    status: str
    request_id: str | None
    call_id: str | None
    approvals: int | None = None
    approvals_required: int | None = None
    released: bool = False
    result: CallResult | None = None


# -- the requests and the reading of their answers, shared by both clients -----------------


def _call_body(
    tool: str, args: Mapping[str, Any] | None, wait_s: float, key: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": tool, "args": dict(args or {})}
    if wait_s:
        body["wait_s"] = wait_s
    if key is not None:
        body["idempotency_key"] = key
    return body


def _raise_for(response: httpx.Response, body: Any) -> None:
    """The caller's error as an exception from ``router.errors``."""
    message = body.get("error") if isinstance(body, dict) else None
    message = str(message or f"HTTP {response.status_code}")
    if response.status_code == 503:
        raise Unavailable(message.removeprefix("unavailable: "))
    raise _ERRORS.get(response.status_code, RequestError)(message)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _call_answer(response: httpx.Response) -> CallResult:
    body = _json(response)
    if response.status_code in _CALL_VALUE_CODES and isinstance(body, dict):
        return CallResult.from_dict(body, http_status=response.status_code)
    if response.status_code in (401, 403, 404):
        _raise_for(response, body)
    return unavailable(f"HTTP {response.status_code} from the API")


def _checked(response: httpx.Response) -> dict[str, Any]:
    body = _json(response)
    if response.status_code != 200 or not isinstance(body, dict):
        _raise_for(response, body)
    return dict(body)


def _receipt(body: dict[str, Any]) -> BatchReceipt:
    return BatchReceipt(
        batch_id=body["batch_id"],
        total=body["total"],
        accepted=body.get("accepted", 0),
        replayed=body.get("replayed", 0),
        rejected=tuple((r["index"], r["error"]) for r in body.get("rejected", [])),
    )


def _status(body: dict[str, Any]) -> BatchStatus:
    return BatchStatus(
        batch_id=body["batch_id"],
        total=body["total"],
        counts=dict(body["counts"]),
        rejected=body.get("rejected", 0),
        done=bool(body["done"]),
    )


def _decided(body: dict[str, Any]) -> Decided:
    if body.get("status") not in _DECISIONS:
        # approve(wait_s=…) on a released call answers with the call's result.
        result = CallResult.from_dict(body)
        return Decided(
            "approved", body.get("request_id"), result.call_id, released=True, result=result
        )
    return Decided(
        status=body["status"],
        request_id=body.get("request_id"),
        call_id=body.get("call_id"),
        approvals=body.get("approvals"),
        approvals_required=body.get("approvals_required"),
        released=bool(body.get("released", False)),
    )


def _result_line(line: str) -> tuple[int, CallResult] | None:
    if not line.strip():
        return None
    body = json.loads(line)
    return int(body.get("index", -1)), CallResult.from_dict(body)


def _batch_body(calls: Iterable[Mapping[str, Any]], key: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"calls": [dict(call) for call in calls]}
    if key is not None:
        body["idempotency_key"] = key
    return body


def _offset(offset: int | None) -> dict[str, str]:
    return {} if offset is None else {"offset": str(offset)}


def _decision_body(reason: str | None, wait_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if reason is not None:
        body["reason"] = reason
    if wait_s:
        body["wait_s"] = wait_s
    return body


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


_LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=200)


class Client:
    """A blocking client with one connection pool; use it as a context manager or close it."""

    def __init__(self, base_url: str = DEFAULT_URL, key: str = "", *, timeout: float = 60.0):
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(key), timeout=timeout, limits=_LIMITS
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call_request(self, method: str, path: str, wait_s: float, **kw: Any) -> CallResult:
        try:
            response = self._http.request(method, path, timeout=wait_s + TIMEOUT_MARGIN_S, **kw)
        except httpx.HTTPError as exc:
            return unavailable(f"cannot reach the API: {exc}")
        return _call_answer(response)

    def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the API: {exc}") from None
        return _checked(response)

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
        body = _call_body(tool, args, wait_s, idempotency_key)
        return self._call_request("POST", "/v1/calls", wait_s, json=body)

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
        body = _batch_body(calls, idempotency_key)
        return _receipt(
            self._request(
                "POST", "/v1/batches", json=body, params=_offset(offset), timeout=BATCH_TIMEOUT_S
            )
        )

    def batch_status(self, batch_id: str) -> BatchStatus:
        return _status(self._request("GET", f"/v1/batches/{batch_id}"))

    def batch_results(self, batch_id: str) -> Iterator[tuple[int, CallResult]]:
        """``(index, result)`` for every call of the batch, in batch order, streamed."""
        with self._http.stream(
            "GET", f"/v1/batches/{batch_id}/results", timeout=BATCH_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                response.read()
                _raise_for(response, _json(response))
            for line in response.iter_lines():
                item = _result_line(line)
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
        return _decided(
            self._request(
                "POST",
                f"/v1/approvals/{request_id}/approve",
                json=_decision_body(reason, wait_s),
                timeout=(wait_s or 0.0) + TIMEOUT_MARGIN_S,
            )
        )

    def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return _decided(
            self._request(
                "POST", f"/v1/approvals/{request_id}/deny", json=_decision_body(reason, None)
            )
        )


class AsyncClient:
    """The same as ``Client``, for asyncio: ``async with AsyncClient(url, key) as client``."""

    def __init__(self, base_url: str = DEFAULT_URL, key: str = "", *, timeout: float = 60.0):
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(key), timeout=timeout, limits=_LIMITS
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call_request(self, method: str, path: str, wait_s: float, **kw: Any) -> CallResult:
        try:
            response = await self._http.request(
                method, path, timeout=wait_s + TIMEOUT_MARGIN_S, **kw
            )
        except httpx.HTTPError as exc:
            return unavailable(f"cannot reach the API: {exc}")
        return _call_answer(response)

    async def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the API: {exc}") from None
        return _checked(response)

    async def call(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        idempotency_key: str | None = None,
    ) -> CallResult:
        body = _call_body(tool, args, wait_s, idempotency_key)
        return await self._call_request("POST", "/v1/calls", wait_s, json=body)

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
        body = _batch_body(calls, idempotency_key)
        return _receipt(
            await self._request(
                "POST", "/v1/batches", json=body, params=_offset(offset), timeout=BATCH_TIMEOUT_S
            )
        )

    async def batch_status(self, batch_id: str) -> BatchStatus:
        return _status(await self._request("GET", f"/v1/batches/{batch_id}"))

    async def batch_results(self, batch_id: str) -> AsyncIterator[tuple[int, CallResult]]:
        async with self._http.stream(
            "GET", f"/v1/batches/{batch_id}/results", timeout=BATCH_TIMEOUT_S
        ) as response:
            if response.status_code != 200:
                await response.aread()
                _raise_for(response, _json(response))
            async for line in response.aiter_lines():
                item = _result_line(line)
                if item is not None:
                    yield item

    async def approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        body = await self._request("GET", "/v1/approvals", params={"status": status})
        return list(body["requests"])

    async def approve(
        self, request_id: str, reason: str | None = None, wait_s: float | None = None
    ) -> Decided:
        return _decided(
            await self._request(
                "POST",
                f"/v1/approvals/{request_id}/approve",
                json=_decision_body(reason, wait_s),
                timeout=(wait_s or 0.0) + TIMEOUT_MARGIN_S,
            )
        )

    async def deny(self, request_id: str, reason: str | None = None) -> Decided:
        return _decided(
            await self._request(
                "POST", f"/v1/approvals/{request_id}/deny", json=_decision_body(reason, None)
            )
        )
