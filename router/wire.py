"""The HTTP API's answers, read back into values: the Python client's half of the wire.

Shared by ``Client`` and ``AsyncClient`` (``router.client``), which only send requests.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Iterable, Mapping
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


def call_body(
    tool: str, args: Mapping[str, Any] | None, wait_s: float, key: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"tool": tool, "args": dict(args or {})}
    if wait_s:
        body["wait_s"] = wait_s
    if key is not None:
        body["idempotency_key"] = key
    return body


def raise_for(response: httpx.Response, body: Any) -> None:
    """The caller's error as an exception from ``router.errors``."""
    message = body.get("error") if isinstance(body, dict) else None
    message = str(message or f"HTTP {response.status_code}")
    if response.status_code == 503:
        raise Unavailable(message.removeprefix("unavailable: "))
    raise _ERRORS.get(response.status_code, RequestError)(message)


def body_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def call_answer(response: httpx.Response) -> CallResult:
    body = body_of(response)
    if response.status_code in _CALL_VALUE_CODES and isinstance(body, dict):
        return CallResult.from_dict(body, http_status=response.status_code)
    if response.status_code in (401, 403, 404):
        raise_for(response, body)
    return unavailable(f"HTTP {response.status_code} from the API")


def checked(response: httpx.Response) -> dict[str, Any]:
    body = body_of(response)
    if response.status_code != 200 or not isinstance(body, dict):
        raise_for(response, body)
    return dict(body)


def receipt(body: dict[str, Any]) -> BatchReceipt:
    return BatchReceipt(
        batch_id=body["batch_id"],
        total=body["total"],
        accepted=body.get("accepted", 0),
        replayed=body.get("replayed", 0),
        rejected=tuple((r["index"], r["error"]) for r in body.get("rejected", [])),
    )


def batch_status(body: dict[str, Any]) -> BatchStatus:
    return BatchStatus(
        batch_id=body["batch_id"],
        total=body["total"],
        counts=dict(body["counts"]),
        rejected=body.get("rejected", 0),
        done=bool(body["done"]),
    )


def decided(body: dict[str, Any]) -> Decided:
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


def result_line(line: str) -> tuple[int, CallResult] | None:
    if not line.strip():
        return None
    body = json.loads(line)
    return int(body.get("index", -1)), CallResult.from_dict(body)


def batch_body(calls: Iterable[Mapping[str, Any]], key: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"calls": [dict(call) for call in calls]}
    if key is not None:
        body["idempotency_key"] = key
    return body


def ndjson_request(lines: Iterable[str], key: str | None, offset: int | None) -> dict[str, Any]:
    headers = {"Content-Type": "application/x-ndjson"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return {
        "content": "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8"),
        "headers": headers,
        "params": offset_params(offset),
        "timeout": BATCH_TIMEOUT_S,
    }


def offset_params(offset: int | None) -> dict[str, str]:
    return {} if offset is None else {"offset": str(offset)}


def decision_body(reason: str | None, wait_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if reason is not None:
        body["reason"] = reason
    if wait_s:
        body["wait_s"] = wait_s
    return body


def auth_headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client in the process, made as httpx makes its default.

    httpx builds a context per client, loading the CA bundle each time (40 ms here), even
    for a plain ``http://`` URL; the async client builds a client per pool it opens, on
    the event loop, in the middle of a burst of calls."""
    return httpx.create_ssl_context()


# Idle connections are dropped after 2 s, before uvicorn's 5 s keep-alive timeout closes
# them from its side: otherwise a request can go out on a connection the server is just
# closing, and fail with "server disconnected".
KEEPALIVE_EXPIRY_S = 2.0
LIMITS = httpx.Limits(
    max_connections=200, max_keepalive_connections=200, keepalive_expiry=KEEPALIVE_EXPIRY_S
)
# The async client's connections, pooled in groups of this many (see ``router.client``).
SHARD_CONNECTIONS = 8
SHARD_LIMITS = httpx.Limits(
    max_connections=SHARD_CONNECTIONS,
    max_keepalive_connections=SHARD_CONNECTIONS,
    keepalive_expiry=KEEPALIVE_EXPIRY_S,
)
MAX_SHARDS = 25
