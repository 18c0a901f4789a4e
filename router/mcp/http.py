"""``/mcp``: the MCP server over streamable HTTP (the SDK's session manager, stateless).

In front of the SDK, in this order: the Host/Origin check against DNS rebinding (the SDK's
own rules, answered as JSON), POST only (405: being stateless, there is no event stream to
GET and no session to DELETE), then the bearer key (401 without a valid one), then a
request's ``id`` (the SDK would take a request whose id is neither a string nor an integer
for a notification and answer 202, silently). Whatever the SDK answers as plain text (wrong
content type, body too large) is rewritten as the API's
``{"ok": false, "error"}``; an unexpected exception is a JSON 500, never a traceback.
"""

from __future__ import annotations

import json
import logging
from contextlib import AbstractAsyncContextManager
from http import HTTPStatus
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.types import INVALID_REQUEST
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from ..auth.bearer import bearer_token
from ..auth.principal import Principal
from ..canonical import ascii_json
from ..errors import NotAuthenticated, PayloadTooLarge, Unavailable
from ..messaging.completions import CompletionListener
from ..names import echo_name
from ..runtime import Runtime
from ..settings import WILDCARD_HOSTS, Settings
from ..threads import in_thread
from ..tools.mcp_unreadable import refused_reason
from .server import NOT_JSON_RPC, Context, ToolrouterMcp
from .wire import BAD_REQUEST_ID, has_bad_request_id

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


# Every protocol version the SDK serves, oldest first.
PROTOCOL_VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Hosts: localhost on any port, the API's own host:port, ``mcp_allowed_hosts``.
    Origins: the same hosts over http and https (a request without an Origin passes)."""
    hosts = [pattern for host in LOCAL_HOSTS for pattern in (host, f"{host}:*")]
    if settings.api_host not in WILDCARD_HOSTS:
        host = f"[{settings.api_host}]" if ":" in settings.api_host else settings.api_host
        hosts.append(f"{host}:{settings.api_port}")
    for part in settings.mcp_allowed_hosts.split(","):
        if entry := part.strip():
            # "Any port" includes the scheme's default, which a client leaves out of Host.
            hosts += [entry, entry.removesuffix(":*")] if entry.endswith(":*") else [entry]
    hosts = list(dict.fromkeys(hosts))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")],
    )


class McpEndpoint:
    """The ASGI app mounted at ``/mcp``. ``run()`` must be entered in the app's lifespan."""

    def __init__(self, runtime: Runtime, listener: CompletionListener) -> None:
        self.runtime = runtime
        self.security = transport_security(runtime.settings)
        self.mcp = ToolrouterMcp(runtime, listener, self.identify)
        # Arguments are measured (and refused) by the dispatcher; the body may carry them
        # escaped, up to six bytes a character.
        self.max_body = max(
            DEFAULT_MAX_REQUEST_BODY_SIZE, 6 * runtime.settings.max_args_bytes + 65536
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.mcp.server,
            # No session state in the process: any API process can answer any request.
            stateless=True,
            security_settings=self.security,
            max_request_body_size=self.max_body,
        )

    def run(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group, for the application's lifespan."""
        return self.manager.run()

    async def identify(self, ctx: Context) -> Principal:
        """The request's key, looked up each time it is asked for (from the cache, which a
        revocation empties): a request that waits long must not outlive its key."""
        scope = getattr(ctx.request, "scope", None)
        token = bearer_token(Headers(scope=scope)) if scope is not None else None
        keys = self.runtime.keys
        known = keys.cached(token)
        return known if known is not None else await in_thread(keys.authenticate, token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = JsonErrors(send)
        try:
            refusal = await TransportSecurityMiddleware(self.security).validate_request(
                Request(scope)
            )
            if refusal is not None:
                await guarded.error(refusal.status_code, bytes(refusal.body).decode())
                return
            version = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER)
            if version is not None and version not in PROTOCOL_VERSIONS:
                # The SDK would take it for a newer request and ask for that one's envelope.
                supported = ", ".join(PROTOCOL_VERSIONS)
                message = f"unsupported protocol version {echo_name(version)}: {supported}"
                # The data a client negotiates with, as the SDK gives it.
                data = {"supported": list(PROTOCOL_VERSIONS), "requested": version}
                await guarded.rpc_error(400, UNSUPPORTED_PROTOCOL_VERSION, message, data)
                return
            if scope["method"] != "POST":
                # Stateless: no stream to open with GET, no session to end with DELETE.
                await guarded.error(
                    405, "method not allowed: /mcp takes POST", [(b"allow", b"POST")]
                )
                return
            try:
                token = bearer_token(Headers(scope=scope))
                await in_thread(self.runtime.keys.authenticate, token)
            except NotAuthenticated as exc:
                await guarded.error(401, str(exc), [(b"www-authenticate", b"Bearer")])
                return
            except Unavailable as exc:
                await guarded.error(503, str(exc))
                return
            body = await BufferedBody.read(receive, self.max_body)
            if has_bad_request_id(body.whole):
                await guarded.rpc_error(400, INVALID_REQUEST, BAD_REQUEST_ID)
                return
            await self.manager.handle_request(scope, body.replay, guarded)
        except PayloadTooLarge:
            raise  # the API's body limit answers it with 413
        except Exception:
            # Last resort: log the traceback here, never send it.
            log.exception("unhandled error at /mcp")
            if not guarded.started:
                await guarded.error(500, "internal error")


class BufferedBody:
    """A request body read ahead (up to a limit) and handed on unchanged as ``replay``."""

    def __init__(self, receive: Receive, head: list[Message], whole: bytes | None) -> None:
        self._receive = receive
        self._head = head
        # The body, when it ended within the limit; None when it is larger or cut short.
        self.whole = whole

    @classmethod
    async def read(cls, receive: Receive, limit: int) -> BufferedBody:
        head: list[Message] = []
        size = 0
        while True:
            message = await receive()
            head.append(message)
            if message["type"] != "http.request":
                return cls(receive, head, None)
            size += len(message.get("body", b""))
            if size > limit:
                return cls(receive, head, None)  # the SDK refuses it with 413
            if not message.get("more_body", False):
                whole = b"".join(part.get("body", b"") for part in head)
                return cls(receive, head, whole)

    async def replay(self) -> Message:
        if self._head:
            return self._head.pop(0)
        return await self._receive()


class JsonErrors:
    """An ASGI ``send`` that turns plain-text error responses into ``{"ok": false, "error"}``.

    Every success passes through untouched, and so do JSON errors (JSON-RPC's), except the
    SDK's answer to JSON that is no JSON-RPC message, whose text is rewritten.
    """

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False
        self._held: Message | None = None
        self._body = b""

    async def error(
        self, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        text = message.strip() or HTTPStatus(status).phrase
        # The SDK capitalises its messages; the API's are lower case ("invalid Host header").
        text = text[:1].lower() + text[1:]
        self.started = True
        body = ascii_json({"ok": False, "error": text})
        await self._send_json(status, body, headers or [])

    async def rpc_error(
        self, status: int, code: int, message: str, data: dict[str, Any] | None = None
    ) -> None:
        """A JSON-RPC error as the SDK words its own (``id`` null: the request's is unusable)."""
        self.started = True
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        body = {"jsonrpc": "2.0", "id": None, "error": error}
        await self._send_json(status, ascii_json(body), [])

    async def _send_json(
        self, status: int, payload: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    *headers,
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode("ascii")),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": payload, "more_body": False})

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if message["status"] >= 400:
                self._held = message
                return
        elif message["type"] == "http.response.body" and self._held is not None:
            self._body += message.get("body", b"")
            if message.get("more_body", False):
                return
            held, self._held = self._held, None
            kept = [
                (name, value)
                for name, value in held.get("headers", [])
                if name.lower() not in (b"content-type", b"content-length")
            ]
            if _is_json(held):
                await self._json_error(held["status"], kept)
            else:
                await self.error(held["status"], self._body.decode("utf-8", "replace"), kept)
            return
        await self.send(message)

    async def _json_error(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """A JSON-RPC error as the SDK wrote it, but for a message that is not JSON-RPC: the
        SDK's text is its validation library's report (with the input and a web address)."""
        body = self._body
        try:
            answer = json.loads(body)
            error = answer["error"]
            if refused_reason(str(error["message"])) is not None:
                error.update(code=INVALID_REQUEST, message=NOT_JSON_RPC)
                body = ascii_json(answer)
        except (ValueError, TypeError, KeyError):
            pass  # not such an error: passed on as it is
        await self._send_json(status, body, headers)


def _is_json(start: Message) -> bool:
    headers: Any = start.get("headers", [])
    for name, value in headers:
        if name.lower() == b"content-type":
            return bool(value.lower().startswith(b"application/json"))
    return False
