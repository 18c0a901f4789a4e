"""HTTP endpoint handlers: the arguments go out as JSON, a JSON answer is the value.

One pooled ``httpx.Client`` per worker process. A non-2xx answer is an error carrying the
remote message and status; 429, 5xx and connection errors are marked retryable (the
retry policy decides what to do with that), a failure after the request left only for an
idempotent tool. An answer is read only up to the result size limit: a service that sends
more (or never stops) fails the call, not the worker.
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
from celery.exceptions import SoftTimeLimitExceeded

from router.context import CallContext
from router.tools import unreachable
from router.tools.registry import Tool, is_idempotent

from .outcome import Outcome

_client: httpx.Client | None = None
_client_pid: int | None = None
MAX_ERROR_TEXT = 500
# Failures before the request left: sending it again cannot make the service act twice.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# A connection gets this share of the tool's timeout: one that does not open fails before
# the run's own limit, as a connection error any tool may retry, not as a stall.
CONNECT_SHARE = 0.5
_DEFAULT_PORTS = {"http": 80, "https": 443}


def client() -> httpx.Client:
    """This process's pooled client (a forked child makes its own)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = httpx.Client(follow_redirects=False)
        _client_pid = os.getpid()
    return _client


def run_http(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    *,
    max_nesting: int,
    max_bytes: int | None = None,
    redact: Callable[[str], str] = str,
) -> Outcome:
    """One request to ``tool``'s endpoint. ``redact`` replaces config secrets in the remote's
    error text before it is cut to length: cut first, a secret across the cut would be left
    in part, which no later replacement recognises."""
    spec = tool.spec.handler.http
    assert spec is not None
    headers = {
        **spec.headers,
        "Idempotency-Key": _header_value(ctx.idempotency_key),
        "X-Toolrouter-Call-Id": ctx.call_id,
    }
    request: dict[str, Any] = (
        {"params": _query(args, fixed=httpx.URL(spec.url).params)}
        if spec.method == "GET"
        else {"json": args}
    )
    connect_s = tool.spec.timeout_s * CONNECT_SHARE
    timeout = httpx.Timeout(tool.spec.timeout_s, connect=connect_s)
    try:
        with client().stream(
            spec.method, spec.url, headers=headers, timeout=timeout, **request
        ) as response:
            body = _read(response, max_bytes)
    except SoftTimeLimitExceeded:
        # The run's limit beats the client's timeout, whose clock starts later: a stall too.
        return Outcome.timed_out(tool.spec.timeout_s, retryable=is_idempotent(tool))
    except httpx.ConnectTimeout:
        return Outcome(
            ok=False,
            error=f"{host_port(spec.url)}: no connection within {connect_s:g} s",
            error_type="ConnectTimeout",
            retryable=True,  # the request never left
        )
    except httpx.TimeoutException as exc:
        return Outcome.timed_out(tool.spec.timeout_s, retryable=_may_send_again(tool, exc))
    except httpx.HTTPError as exc:
        # Connection refused, reset, DNS: the service may be back in a moment.
        error = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TransportError):
            # "Connection refused" alone does not say which service of many.
            where = host_port(spec.url)
            unreachable.report(f"{tool.name} at {where}", str(exc))
            error = f"{where}: {error}"
        return Outcome(
            ok=False,
            error=error,
            error_type=type(exc).__name__,
            retryable=_may_send_again(tool, exc),
        )
    except Exception as exc:
        # Whatever else the client raises (a header it cannot encode, say) fails the call.
        return Outcome.of_exception(exc)
    if response.is_success:
        if body is None:
            assert max_bytes is not None
            return Outcome.too_large(max_bytes)
        try:
            value = json.loads(body)
        except ValueError:
            return Outcome.of_value(
                _text(response, body), max_nesting=max_nesting, max_bytes=max_bytes
            )
        except RecursionError:
            return Outcome.too_deep(max_nesting)
        return Outcome.of_value(value, max_nesting=max_nesting, max_bytes=max_bytes)
    status = response.status_code
    message = response.reason_phrase if body is None else _remote_message(response, body, redact)
    return Outcome(
        ok=False,
        error=f"HTTP {status}: {message}",
        error_type="HTTPError",
        retryable=status == 429 or status >= 500,
        retry_after_s=_retry_after(response),
    )


def host_port(url: str) -> str:
    """Where a tool's requests go, as ``host:port`` (``[::1]:8080``), the port always."""
    where = httpx.URL(url)
    host = f"[{where.host}]" if ":" in where.host else where.host
    return f"{host}:{where.port or _DEFAULT_PORTS.get(where.scheme, '')}"


def _may_send_again(tool: Tool, exc: httpx.HTTPError) -> bool:
    """Whether a failed exchange is retryable: always when the request never left, else
    only for an idempotent tool (a reset or a stalled answer comes after the service may
    have acted)."""
    return isinstance(exc, NEVER_SENT) or is_idempotent(tool)


def _query(args: dict[str, Any], *, fixed: httpx.QueryParams) -> httpx.QueryParams:
    """The configured URL's query parameters, then the arguments as more of them. (The
    client replaces a URL's query with the parameters it is given.) An argument never
    replaces a parameter the operator wrote (an account, a key)."""
    return fixed.merge(
        {
            key: value if isinstance(value, str) else httpx.QueryParams({key: value})[key]
            for key, value in args.items()
            if isinstance(value, str | int | float | bool) and key not in fixed
        }
    )


def _header_value(text: str) -> str:
    """``text`` as a header can carry it: ASCII as it is, anything else percent-encoded
    (UTF-8), so an idempotency key in any script reaches the service."""
    return text if text.isascii() else quote(text, safe=string.punctuation + " ")


def _read(response: httpx.Response, max_bytes: int | None) -> bytes | None:
    """The answer's body, decoded as its ``Content-Encoding`` says; None once it passes
    ``max_bytes``, the rest left unread."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if max_bytes is not None and len(body) > max_bytes:
            return None
    return bytes(body)


def _text(response: httpx.Response, body: bytes) -> str:
    """The body as text, in the answer's charset (UTF-8 by default)."""
    return body.decode(response.encoding or "utf-8", errors="replace")


def _remote_message(response: httpx.Response, body: bytes, redact: Callable[[str], str]) -> str:
    """The service's own words: a JSON body's error/message/detail, else its text."""
    try:
        parsed = json.loads(body)
    # Nested past what the parser recurses: the text is the message then.
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        for key in ("error", "message", "detail"):
            if isinstance(parsed.get(key), str) and parsed[key]:
                return redact(str(parsed[key]))[:MAX_ERROR_TEXT]
    text = _text(response, body).strip()
    return redact(text)[:MAX_ERROR_TEXT] if text else response.reason_phrase


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
