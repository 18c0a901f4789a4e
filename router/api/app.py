"""The FastAPI application: routes, the error table, start-up and shutdown."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import metrics, ui
from ..canonical import shown_as_text
from ..db.wal_checkpoints import WalCheckpointer
from ..errors import RequestError, SchemaOutdated, Unavailable
from ..files import create_private_files
from ..heap import freeze_start_up_objects
from ..mcp import McpEndpoint
from ..metrics import NotifyOutcome
from ..notify.announce import ANY_CHANNEL
from ..runtime import Runtime
from ..settings import Settings
from ..tools.notify_config import ChannelType
from ..ui.headers import InboxHeaders
from . import (
    routes_approvals,
    routes_audit,
    routes_batches,
    routes_calls,
    routes_health,
    routes_notifications,
    routes_route,
    routes_tools,
)
from .bodies import SMALL_BODY_BYTES, decision_body_bytes
from .body_limit import BodyLimit
from .direct_routes import DirectRoutes
from .query_names import QueryNames
from .responses import AsciiJSONResponse

log = logging.getLogger(__name__)

CLIENT_LEFT = "client left before the request body ended"


def _error(status: int, message: str) -> JSONResponse:
    return AsciiJSONResponse({"ok": False, "error": message}, status_code=status)


async def _request_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    return _error(exc.status_code, str(exc))


async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    message = str(exc)
    return _error(503, message if message.startswith("unavailable") else f"unavailable: {message}")


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    return _error(422, f"{where}: {first['msg']}" if where else str(first["msg"]))


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return _error(exc.status_code, str(exc.detail))


async def _client_left(request: Request, _: Exception) -> JSONResponse:
    # Nobody is left to answer: one line for the operator, not a traceback. The path is
    # the client's, escapes and all: written as text, it cannot act on a terminal.
    path = shown_as_text(request.url.path)
    log.warning("%s %s: %s", request.method, path, CLIENT_LEFT)
    return _error(400, CLIENT_LEFT)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    # Last resort: log the traceback here, never send it.
    log.exception("unhandled error", exc_info=exc)
    return _error(500, "internal error")


# One table maps errors to HTTP answers (the starlette ``exception_handlers`` idiom).
EXCEPTION_HANDLERS = {
    RequestError: _request_error,
    Unavailable: _unavailable,
    SchemaOutdated: _unavailable,
    RequestValidationError: _validation,
    StarletteHTTPException: _http,
    ClientDisconnect: _client_left,
    Exception: _unexpected,
}


def body_limits(settings: Settings) -> Callable[[str], int]:
    """The largest body each path accepts (``BodyLimit``)."""
    calls = settings.call_body_bytes
    decisions = decision_body_bytes(settings)

    def limit_for(path: str) -> int:
        if path.startswith("/v1/batches"):
            return settings.max_batch_bytes
        if path.startswith("/v1/calls") or path.startswith("/mcp"):
            return calls
        if path.startswith("/v1/approvals"):
            return decisions
        if path.startswith("/ui/edit"):
            # A form's percent-encoding triples a byte at most; its text is not JSON-escaped.
            return 3 * (SMALL_BODY_BYTES + settings.max_args_bytes)
        return SMALL_BODY_BYTES

    return limit_for


def create_app(runtime: Runtime, *, direct_routes: bool = True) -> FastAPI:
    """The API around ``runtime``; the config, the schema and the key are checked first.
    ``direct_routes=False`` serves the hot endpoints through FastAPI's routing too
    (``router.api.direct_routes``; the tests compare the two)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.listener.start()
        # The ranker's index and embeddings are built beside the first requests, not in them.
        threading.Thread(target=runtime.ranker.warm, name="toolrouter-ranker", daemon=True).start()
        checkpointer = app.state.checkpointer = WalCheckpointer.for_engine(runtime.engine)
        if checkpointer is not None:
            checkpointer.start()
        try:
            async with app.state.mcp.run():
                freeze_start_up_objects()
                yield
        finally:
            if checkpointer is not None:
                checkpointer.stop()
            await app.state.listener.stop()
            runtime.close()

    create_private_files()
    # Before any metric exists in this process: samples go to the shared directory.
    metrics.enable(runtime.settings)
    # The config, the schema and the key first: the listener below needs the key.
    runtime.prepare()
    metrics.show_zeros(
        [(ANY_CHANNEL, NotifyOutcome.NOT_QUEUED)]
        + [
            (channel, outcome)
            for channel in ChannelType
            for outcome in NotifyOutcome
            if outcome is not NotifyOutcome.NOT_QUEUED
        ]
    )
    # Swagger UI's script and style from the API itself: a machine without internet, or a
    # browser that blocks the CDN, shows /docs too.
    app = FastAPIOffline(
        title="toolrouter",
        version="1",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
        docs_url="/docs",
        static_url="/docs/static",
        default_response_class=AsciiJSONResponse,
        # A trailing slash is a 404 JSON answer, not a redirect to another method's route.
        redirect_slashes=False,
        redoc_url=None,
    )
    app.state.runtime = runtime
    # Keys are looked up once per TTL, not per request, while the listener can hear
    # revocations (router.auth.key_cache).
    app.state.listener = runtime.listener
    app.state.notifier = runtime.notifier()
    # MCP over streamable HTTP (SPEC §11); its session manager runs in the lifespan above.
    app.state.mcp = McpEndpoint(runtime, app.state.listener)
    app.add_route("/mcp", app.state.mcp, include_in_schema=False)
    app.include_router(routes_calls.router)
    app.include_router(routes_approvals.router)
    app.include_router(routes_batches.router)
    app.include_router(routes_tools.router)
    app.include_router(routes_audit.router)
    app.include_router(routes_notifications.router)
    app.include_router(routes_health.router)
    app.include_router(routes_route.router)
    app.include_router(ui.router)
    app.mount("/ui/static", StaticFiles(directory=ui.STATIC_DIR), name="ui-static")
    app.add_api_route(
        "/ui", lambda: RedirectResponse("/ui/", status_code=307), include_in_schema=False
    )
    app.add_middleware(InboxHeaders)
    if direct_routes:
        app.add_middleware(DirectRoutes)
    # Outside the direct routes, so their query is checked too.
    app.add_middleware(QueryNames)
    # Outermost: no body over its limit reaches any route, direct or not.
    app.add_middleware(BodyLimit, limit_for=body_limits(runtime.settings))
    return app


def app_from_env() -> FastAPI:
    """Uvicorn factory: ``uvicorn --factory router.api.app:app_from_env``. Started so,
    uvicorn believes ``X-Forwarded-For`` from 127.0.0.1 unless told otherwise: pass
    ``--no-proxy-headers`` (or ``--forwarded-allow-ips`` with the proxies), as ``toolrouter
    api`` does from ``TOOLROUTER_TRUSTED_PROXIES``."""
    from ..settings import settings_or_exit

    settings = settings_or_exit()
    # ``toolrouter api`` starts this many of these processes; they split one pool.
    return create_app(Runtime(settings, pool_share=settings.resolved_api_processes))
