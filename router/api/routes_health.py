"""The unauthenticated endpoints: Prometheus ``/metrics``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from sqlalchemy import text

from ..messaging.redis_clients import redis_client, redis_problem
from .deps import in_thread, runtime_of
from .exposition import exposition
from .models import errors
from .responses import AsciiJSONResponse

if TYPE_CHECKING:
    from ..runtime import Runtime

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    # Declares the answer's media type in the OpenAPI document; the route sets its own.
    response_class=PlainTextResponse,
    responses={200: {"description": "Prometheus text exposition format"}},
)
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus text: calls by tool and outcome, latency, cost, queue depths, pending
    requests, approval wait time; gathered across the API and every worker."""
    body, content_type = await in_thread(exposition, runtime_of(request))
    return Response(body, media_type=content_type)


@router.get("/", include_in_schema=False)
async def home() -> RedirectResponse:
    """People who open the API's address land in the approval inbox."""
    return RedirectResponse("/ui/", status_code=307)


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> RedirectResponse:
    return RedirectResponse("/ui/static/favicon.svg", status_code=301)


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """Liveness: the process answers."""
    return {"ok": True}


@router.get("/readyz", responses=errors(503))
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the database and Redis both answer."""
    problems = await in_thread(_readiness_problems, runtime_of(request))
    if problems:
        detail = "; ".join(f"{name}: {reason}" for name, reason in problems.items())
        return AsciiJSONResponse({"ok": False, "error": f"unavailable: {detail}"}, status_code=503)
    return AsciiJSONResponse({"ok": True})


# Uptime checkers and load balancers often probe with HEAD: the same answers, no body.
@router.head("/healthz", include_in_schema=False)
async def healthz_head() -> Response:
    return Response(status_code=200)


@router.head("/readyz", include_in_schema=False)
async def readyz_head(request: Request) -> Response:
    problems = await in_thread(_readiness_problems, runtime_of(request))
    return Response(status_code=503 if problems else 200)


def _readiness_problems(runtime: Runtime) -> dict[str, str]:
    problems = {}
    try:
        with runtime.store.reading() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        problems["database"] = str(exc)
    client = redis_client(runtime.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        problems["redis"] = redis_problem(exc)
    finally:
        client.close()
    return problems
