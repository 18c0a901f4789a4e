"""The two hottest endpoints, served without FastAPI's generic request handling.

Every agent call is a ``POST /v1/calls``, and an agent that polls reads
``GET /v1/calls/{id}``. For these two, the work FastAPI and Starlette do around the
endpoint (the exception and exit-stack middleware, matching the path against every route,
solving the key dependency, the endpoint wrapper) is a large share of the API's CPU per
call; the benchmark page has the figure. This middleware hands those two requests straight
to the endpoint functions the FastAPI routes declare; the routes stay registered, for the
OpenAPI schema and for every other method and path.

What FastAPI would do around them is done here the same way: the caller's key is the same
``principal`` dependency, an error goes through the app's own exception handler table,
and anything that table leaves to its catch-all goes up to Starlette's
``ServerErrorMiddleware``. ``tests/core/test_direct_routes.py`` sends the same requests
both ways and compares the answers. The query parameters each endpoint reads are named
beside it (``Direct.query``): ``router.api.query_names`` refuses any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, cast

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .deps import principal
from .routes_calls import get_call, submit_call

CALLS = "/v1/calls"
_ONE_CALL = CALLS + "/"
WAIT_S = "wait_s"

Endpoint = Callable[[Request], Awaitable[Response]]


class Direct(NamedTuple):
    """A request served directly: the endpoint, and the query parameters it reads."""

    endpoint: Endpoint
    query: frozenset[str]


async def _submit(request: Request) -> Response:
    return await submit_call(request, await principal(request))


_SUBMIT = Direct(_submit, frozenset())


def _get(call_id: str) -> Direct:
    async def endpoint(request: Request) -> Response:
        wait_s = request.query_params.get(WAIT_S)
        return await get_call(request, call_id, wait_s, await principal(request))

    return Direct(endpoint, frozenset({WAIT_S}))


def direct_for(scope: Scope) -> Direct | None:
    """Where this request goes directly, or None for FastAPI's routing. The paths match
    as FastAPI's do: exact, no trailing slash, a call id without ``/``."""
    if scope["type"] != "http" or scope.get("root_path"):
        return None
    method, path = scope["method"], scope["path"]
    if method == "POST" and path == CALLS:
        return _SUBMIT
    if method == "GET" and path.startswith(_ONE_CALL):
        call_id = path[len(_ONE_CALL) :]
        if call_id and "/" not in call_id:
            return _get(call_id)
    return None


class DirectRoutes:
    """ASGI middleware: ``direct_for``'s requests go straight to their endpoints."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = direct_for(scope)
        if direct is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await direct.endpoint(request)
        except Exception as exc:
            handler = _handler_for(scope["app"], exc)
            if handler is None:
                raise  # to ServerErrorMiddleware, as from any route
            response = await handler(request, exc)
        await response(scope, receive, send)


def _handler_for(app: FastAPI, exc: Exception) -> Callable[..., Awaitable[Any]] | None:
    """The app's handler for ``exc``, looked up by class as Starlette does; None for the
    catch-all ``Exception`` handler, which Starlette runs in ``ServerErrorMiddleware``.
    (Every handler of the table is a coroutine function.)"""
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        handler = app.exception_handlers.get(cls)
        if handler is not None:
            return cast(Callable[..., Awaitable[Any]], handler)
    return None
