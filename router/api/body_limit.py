"""Request bodies over their route's limit are refused before they are read: from
``Content-Length`` when the client declares it, else as soon as the stream passes the
limit. Nothing larger than the limit is ever held in memory. A compressed body is refused
too (415): it would be read as text it is not, and answered "not valid UTF-8".
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import PayloadTooLarge
from ..json_input import past_limit, too_large
from ..names import echo_name
from .responses import AsciiJSONResponse

IDENTITY = ("", "identity")


class BodyLimit:
    """ASGI middleware; ``limit_for(path)`` is the largest body that path accepts."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        encoding = _header(scope, b"content-encoding").decode("latin-1").strip().lower()
        if encoding not in IDENTITY:
            refused = f"Content-Encoding {echo_name(encoding)} is not accepted: send the body as is"
            await _refuse(scope, receive, send, refused, status_code=415)
            return
        limit = self.limit_for(str(scope.get("path", "")))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(scope, receive, send, str(too_large(declared, limit)))
            return
        received = 0
        started = over = False

        async def counting_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    # Raised into whoever reads the body; the API's error table answers 413.
                    raise past_limit(limit)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if over:
                    # The rest of the body is still coming: end the connection, do not read it.
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"connection", b"close")],
                    }
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except PayloadTooLarge as exc:
            # An endpoint outside the API's error table (a mounted ASGI app) let it through.
            if not started:
                await _refuse(scope, receive, send, str(exc))


def _content_length(scope: Scope) -> int | None:
    try:
        return int(_header(scope, b"content-length") or b"-")
    except ValueError:
        return None


def _header(scope: Scope, wanted: bytes) -> bytes:
    for name, value in scope.get("headers", ()):
        if name == wanted:
            return bytes(value)
    return b""


async def _refuse(
    scope: Scope, receive: Receive, send: Send, error: str, *, status_code: int = 413
) -> None:
    refusal = AsciiJSONResponse(
        {"ok": False, "error": error}, status_code=status_code, headers={"connection": "close"}
    )
    await refusal(scope, receive, send)
