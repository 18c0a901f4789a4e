"""``/v1/tools``, ``/v1/audit``, and the unauthenticated health endpoints."""

from __future__ import annotations

from typing import Any

import redis
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from .. import audit, metrics, stats
from ..dispatcher import echo_name
from ..errors import BadRequest, NotFound
from ..keys import Principal
from ..status import AuditEvent
from .bodies import check_call_id
from .deps import blocking, principal, require_operator, runtime_of
from .responses import AsciiJSONResponse

router = APIRouter()

AUDIT_PAGE_MAX = 1000


@router.get("/v1/tools", tags=["tools"])
async def list_tools(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    """Every registered tool's definition and schemas."""
    return {"ok": True, "tools": [tool.describe() for tool in runtime_of(request).registry]}


@router.get("/v1/tools/{name}", tags=["tools"])
async def get_tool(
    request: Request, name: str, who: Principal = Depends(principal)
) -> dict[str, Any]:
    runtime = runtime_of(request)
    tool = runtime.registry.get(name)
    if tool is None:
        raise NotFound(f"unknown tool: {echo_name(name)}")

    def read() -> dict[str, Any]:
        with runtime.store.reading() as conn:
            return stats.tool_stats(conn, runtime.registry, tool.name)

    return {"ok": True, "tool": tool.describe(), "stats": await blocking(read)}


def _int_param(value: str | None, name: str, *, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None
    if not low <= number <= high:
        raise BadRequest(f"{name} must be between {low} and {high}")
    return number


@router.get("/v1/audit", tags=["audit"])
async def read_audit(
    request: Request,
    tool: str | None = None,
    event: str | None = None,
    call_id: str | None = None,
    after_seq: str | None = None,
    limit: str | None = None,
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    """Audit rows in order (operators only). Page with ``after_seq`` = the last ``seq`` seen."""
    require_operator(who)
    if event is not None and event not in AuditEvent.__members__.values():
        raise BadRequest(f"unknown event: {echo_name(event)}")
    if tool is not None and (len(tool) > 256 or not tool.isprintable()):
        raise BadRequest("tool must be 1-256 printable characters")
    if call_id is not None:
        check_call_id(call_id)
    after = _int_param(after_seq, "after_seq", default=0, low=0, high=2**62)
    count = _int_param(limit, "limit", default=100, low=1, high=AUDIT_PAGE_MAX)
    store = runtime_of(request).store

    def read() -> list[dict[str, Any]]:
        with store.reading() as conn:
            return audit.query(
                conn, tool=tool, event=event, call_id=call_id, after_seq=after, limit=count
            )

    rows = await blocking(read)
    return {"ok": True, "rows": rows, "next_after_seq": rows[-1]["seq"] if rows else after}


@router.get("/v1/audit/verify", tags=["audit"])
async def verify_audit(request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    """Check the audit log (operators only): the keyed chain, its signed head, checkpoints and
    archive segments. ``ok`` is false when anything does not hold; ``problems`` says where."""
    require_operator(who)
    report = await blocking(runtime_of(request).verify_audit)
    return AsciiJSONResponse(report.to_dict())


@router.get("/metrics", tags=["health"])
async def prometheus_metrics(request: Request) -> Response:
    """Prometheus text: calls by tool and outcome, latency, cost, queue depths, pending
    requests, approval wait time; gathered across the API and every worker."""
    body, content_type = await blocking(metrics.exposition, runtime_of(request))
    return Response(body, media_type=content_type)


@router.get("/v1/tools/{name}/stats", tags=["tools"])
async def get_tool_stats(
    request: Request, name: str, who: Principal = Depends(principal)
) -> dict[str, Any]:
    """Calls, success rate, p50/p95 latency, cost and errors by type for one tool."""
    runtime = runtime_of(request)
    if runtime.registry.get(name) is None:
        raise NotFound(f"unknown tool: {echo_name(name)}")

    def read() -> dict[str, Any]:
        with runtime.store.reading() as conn:
            return stats.tool_stats(conn, runtime.registry, name)

    return {"ok": True, "stats": await blocking(read)}


@router.get("/healthz", tags=["health"])
async def healthz() -> dict[str, Any]:
    """Liveness: the process answers."""
    return {"ok": True}


@router.get("/readyz", tags=["health"])
async def readyz(request: Request) -> JSONResponse:
    """Readiness: the database and Redis both answer."""
    runtime = runtime_of(request)

    def check() -> dict[str, str]:
        problems = {}
        try:
            with runtime.store.reading() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            problems["database"] = str(exc)
        try:
            redis.Redis.from_url(
                runtime.redis_url, socket_timeout=2, socket_connect_timeout=2
            ).ping()
        except Exception as exc:
            problems["redis"] = str(exc)
        return problems

    problems = await blocking(check)
    if problems:
        detail = "; ".join(f"{name}: {reason}" for name, reason in problems.items())
        return AsciiJSONResponse({"ok": False, "error": f"unavailable: {detail}"}, status_code=503)
    return AsciiJSONResponse({"ok": True})
