"""A query parameter given more than once is refused before any route sees it.

Which of two values counts would be the framework's choice (Starlette keeps the last),
so ``?wait_s=-5&wait_s=1`` passed as 1 and ``?event=nope&event=queued`` as ``queued``;
and a check that read one value while the code used the other would check nothing.
No endpoint takes a list in its query.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from ..names import echo_name
from .responses import AsciiJSONResponse


class RepeatedQuery:
    """ASGI middleware: 422 for a query string naming a parameter twice."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        repeated = first_repeated(query) if query else None
        if repeated is None:
            await self.app(scope, receive, send)
            return
        refusal = AsciiJSONResponse(
            {"ok": False, "error": f"query parameter given more than once: {echo_name(repeated)}"},
            status_code=422,
        )
        await refusal(scope, receive, send)


def first_repeated(query: bytes) -> str | None:
    """The first parameter ``query`` names twice, as the framework decodes names."""
    seen: set[str] = set()
    for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name in seen:
            return name
        seen.add(name)
    return None
