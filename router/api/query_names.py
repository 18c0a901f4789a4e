"""The names of a query string, checked before any route sees them: each given once, and
under ``/v1/`` each one its route reads. Either fault is a 422 naming the parameter.

Given twice: which value counts would be the framework's choice (Starlette keeps the last),
so ``?wait_s=-5&wait_s=1`` passed as 1 and ``?event=nope&event=queued`` as ``queued``;
and a check that read one value while the code used the other would check nothing.
No endpoint takes a list in its query.

Not read: a name no route reads was dropped without a word, so ``?stauts=failed`` listed
every delivery as if filtered and ``POST /v1/calls?wait=5`` did not wait. A route reads
the query parameters its operation declares in the API's OpenAPI document (FastAPI writes
them from the route's signature and its dependencies, aliases and all); the two direct
routes read those ``router.api.direct_routes`` names. Only the JSON API under ``/v1/`` is
held to this: the inbox, ``/mcp``, ``/docs``, ``/openapi.json`` and the probes are pages a
browser, a proxy or a monitor may add its own parameters to, and none of them reads one.
"""

from __future__ import annotations

from collections.abc import Sequence
from re import Pattern
from typing import Any
from urllib.parse import parse_qsl

from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from ..names import echo_name
from .direct_routes import direct_for
from .responses import AsciiJSONResponse

CHECKED_PREFIX = "/v1/"

# Per method: each checked operation's path pattern and the query parameters it declares.
Declared = dict[str, list[tuple[Pattern[str], frozenset[str]]]]


class QueryNames:
    """ASGI middleware: 422 for a query string naming a parameter twice, or naming one its
    ``/v1/`` route does not read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._declared: Declared | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        error = self.refusal(scope, query) if query else None
        if error is None:
            await self.app(scope, receive, send)
            return
        refusal = AsciiJSONResponse({"ok": False, "error": error}, status_code=422)
        await refusal(scope, receive, send)

    def refusal(self, scope: Scope, query: bytes) -> str | None:
        """Why this request's ``query`` is refused; None when it is not."""
        # Decoded as Starlette decodes them for the routes.
        names = [name for name, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)]
        repeated = first_repeated(names)
        if repeated is not None:
            return f"query parameter given more than once: {shown(repeated)}"
        reads = self.reads(scope)
        unknown = None if reads is None else next((n for n in names if n not in reads), None)
        return None if unknown is None else f"unknown query parameter: {shown(unknown)}"

    def reads(self, scope: Scope) -> frozenset[str] | None:
        """The query parameters the request's route reads; None for a request not checked
        (outside ``/v1/``, or no route of its path and method: routing answers 404, 405)."""
        direct = direct_for(scope)
        if direct is not None:
            return direct.query
        if self._declared is None:
            # Built once, on the first request that needs it: every route is in by then.
            self._declared = declared(scope["app"].openapi())
        return declared_query(self._declared, scope["method"], route_path(scope))


def first_repeated(names: Sequence[str]) -> str | None:
    """The first name ``names`` holds twice."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def shown(name: str) -> str:
    """A caller's parameter name as an error message shows it; ``""`` for an empty one."""
    return echo_name(name) if name else '""'


def declared(document: dict[str, Any]) -> Declared:
    """The checked operations of an OpenAPI ``document`` with the query parameters of each."""
    table: Declared = {}
    for path, item in document["paths"].items():
        if not path.startswith(CHECKED_PREFIX):
            continue
        pattern = compile_path(path)[0]
        for method, operation in item.items():
            query = frozenset(
                parameter["name"]
                for parameter in operation.get("parameters", ())
                if parameter["in"] == "query"
            )
            table.setdefault(method.upper(), []).append((pattern, query))
    return table


def declared_query(table: Declared, method: str, path: str) -> frozenset[str] | None:
    """The query parameters the operation of ``method`` and ``path`` declares; None when
    ``table`` has no such operation."""
    for pattern, query in table.get(method, ()):
        if pattern.match(path):
            return query
    return None


def route_path(scope: Scope) -> str:
    """The path the routes match: the request's, less any ``root_path`` it starts with."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path
