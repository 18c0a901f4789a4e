"""What both clients send: the requests of the HTTP API, whatever library carries them.

``Api`` holds one API's URLs and one key's headers, built once per client, and hands out
``Request`` values; ``Client`` and ``AsyncClient`` only put them on the wire and read the
answers back (``router.client.answers``).
"""

from __future__ import annotations

import functools
import json
import ssl
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..names import path_segment

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_WAIT_S = 30.0
DEFAULT_TIMEOUT_S = 60.0
# The HTTP timeout of a waited call is the server-side wait plus this.
TIMEOUT_MARGIN_S = 30.0
# Bulk submissions of 100,000 calls take a while to store.
BATCH_TIMEOUT_S = 600.0
# Connections per client: enough for as many calls in flight as an agent runs.
MAX_CONNECTIONS = 200
# Idle connections are dropped after 2 s, before uvicorn's 5 s keep-alive timeout closes
# them from its side: otherwise a request can go out on a connection the server is just
# closing, and fail with "server disconnected".
KEEPALIVE_EXPIRY_S = 2.0


@dataclass(frozen=True, slots=True)
class Request:
    """One request, its headers whole (the key's included): ``timeout`` bounds the wait for a
    connection and each wait for the server."""

    method: str
    url: str
    timeout: float
    headers: Mapping[str, str]
    body: bytes | None = None


class Api:
    """One API (``base_url``) and one key: the requests the clients send to it."""

    def __init__(self, base_url: str, key: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            # Caught here: without a scheme, each HTTP library fails later in its own words.
            raise ValueError(
                f"base_url must be an http:// or https:// URL such as {DEFAULT_URL}, "
                f"not {base_url!r}"
            )
        self.base_url = base_url
        self.timeout = timeout
        self.auth = {"Authorization": f"Bearer {key}"}
        self.json = {**self.auth, "Content-Type": "application/json"}
        self.tls = tls_context() if urllib.parse.urlsplit(base_url).scheme == "https" else None
        self.proxy = proxy_for(base_url)
        self._calls = endpoint(base_url, "/v1/calls")

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        url = endpoint(self.base_url, path)
        return f"{url}?{urllib.parse.urlencode(params)}" if params else url

    # -- agents ----------------------------------------------------------------------

    def call(
        self, tool: str, args: Mapping[str, Any] | None, wait_s: float, key: str | None
    ) -> Request:
        body: dict[str, Any] = {"tool": tool, "args": arguments(args)}
        if wait_s:
            body["wait_s"] = wait_s
        if key is not None:
            body["idempotency_key"] = key
        return Request("POST", self._calls, wait_s + TIMEOUT_MARGIN_S, self.json, encode(body))

    def explain(self, tool: str, args: Mapping[str, Any] | None, key: str | None) -> Request:
        body: dict[str, Any] = {"tool": tool, "args": arguments(args), "dry_run": True}
        if key is not None:
            body["idempotency_key"] = key
        return Request("POST", self._calls, self.timeout, self.json, encode(body))

    def route(self, task: str, strategy: str | None, capability: str | None, limit: int) -> Request:
        body: dict[str, Any] = {"task": task, "limit": limit}
        if strategy is not None:
            body["strategy"] = strategy
        if capability is not None:
            body["capability"] = capability
        return Request("POST", self.url("/v1/route"), self.timeout, self.json, encode(body))

    def result(self, call_id: str, wait_s: float) -> Request:
        params = {"wait_s": str(wait_s)} if wait_s else None
        url = self.url(f"/v1/calls/{path_segment(call_id)}", params)
        return Request("GET", url, wait_s + TIMEOUT_MARGIN_S, self.auth)

    def cancel(self, call_id: str) -> Request:
        url = self.url(f"/v1/calls/{path_segment(call_id)}")
        return Request("DELETE", url, TIMEOUT_MARGIN_S, self.auth)

    def batch(
        self, calls: Iterable[Mapping[str, Any]], key: str | None, offset: int | None
    ) -> Request:
        body: dict[str, Any] = {"calls": [dict(call) for call in calls]}
        if key is not None:
            body["idempotency_key"] = key
        url = self.url("/v1/batches", _offset(offset))
        return Request("POST", url, BATCH_TIMEOUT_S, self.json, encode(body))

    def batch_lines(self, lines: Iterable[str], key: str | None, offset: int | None) -> Request:
        """NDJSON lines as they are: a line that is not JSON is rejected at its index."""
        headers = {**self.auth, "Content-Type": "application/x-ndjson"}
        if key is not None:
            headers["Idempotency-Key"] = key
        body = "".join(line.rstrip("\n") + "\n" for line in lines).encode("utf-8")
        url = self.url("/v1/batches", _offset(offset))
        return Request("POST", url, BATCH_TIMEOUT_S, headers, body)

    def batch_status(self, batch_id: str) -> Request:
        url = self.url(f"/v1/batches/{path_segment(batch_id)}")
        return Request("GET", url, self.timeout, self.auth)

    def batch_results(self, batch_id: str) -> Request:
        url = self.url(f"/v1/batches/{path_segment(batch_id)}/results")
        return Request("GET", url, BATCH_TIMEOUT_S, self.auth)

    # -- approvers -------------------------------------------------------------------

    def approvals(self, status: str) -> Request:
        url = self.url("/v1/approvals", {"status": status})
        return Request("GET", url, self.timeout, self.auth)

    def approve(self, request_id: str, reason: str | None, wait_s: float | None) -> Request:
        url = self.url(f"/v1/approvals/{path_segment(request_id)}/approve")
        body = encode(_decision(reason, wait_s))
        return Request("POST", url, (wait_s or 0.0) + TIMEOUT_MARGIN_S, self.json, body)

    def deny(self, request_id: str, reason: str | None) -> Request:
        url = self.url(f"/v1/approvals/{path_segment(request_id)}/deny")
        return Request("POST", url, self.timeout, self.json, encode(_decision(reason, None)))


def _offset(offset: int | None) -> dict[str, str] | None:
    return None if offset is None else {"offset": str(offset)}


def _decision(reason: str | None, wait_s: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if reason is not None:
        body["reason"] = reason
    if wait_s:
        body["wait_s"] = wait_s
    return body


def arguments(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as sent; anything but a mapping is the caller's mistake."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise TypeError(
            f"args must be a mapping of argument names to values, not {type(args).__name__}"
        )
    return dict(args)


def encode(body: Any) -> bytes:
    """Compact UTF-8 JSON; a NaN or an infinity, which JSON has not, raises ValueError."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def endpoint(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, whose own path stays as a prefix: ``https://host/api`` and
    ``/v1/calls`` make ``https://host/api/v1/calls``."""
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def proxy_for(base_url: str) -> str | None:
    """The proxy the environment names for ``base_url`` (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``, unless ``NO_PROXY`` exempts its host), looked up once per client rather
    than on every request as aiohttp would."""
    parts = urllib.parse.urlsplit(base_url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client in the process, verifying with the system's CA
    bundle: loading the bundle is slow and blocks, so it happens once."""
    return ssl.create_default_context()
