"""``/v1/tools``: definitions, schemas and measured stats of the registered tools."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from ..auth.principal import Principal
from ..errors import NotFound
from ..names import echo_name
from ..tools import stats
from .deps import in_thread, principal, runtime_of
from .models import errors

router = APIRouter(tags=["tools"])


@router.get("/v1/tools", responses=errors(401, 422, 503))
async def list_tools(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    """Every registered tool's definition and schemas."""
    return {"ok": True, "tools": [tool.describe() for tool in runtime_of(request).registry]}


@router.get("/v1/tools/{name}", responses=errors(401, 404, 422, 503))
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

    return {"ok": True, "tool": tool.describe(), "stats": await in_thread(read)}


@router.get("/v1/tools/{name}/stats", responses=errors(401, 404, 422, 503))
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

    return {"ok": True, "stats": await in_thread(read)}
