"""``POST /v1/route``: ranked tools for a task, by strategy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from .. import routing, stats
from ..errors import Forbidden
from ..keys import Principal
from ..runtime import Runtime
from ..status import Role
from .bodies import object_body
from .deps import blocking, principal, runtime_of

router = APIRouter(tags=["route"])

ROUTE_FIELDS = frozenset({"task", "capability", "budget", "strategy", "limit"})


def measured(runtime: Runtime) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Each tool's measured p50 latency and success rate, from the database."""
    latency: dict[str, float | None] = {}
    success: dict[str, float | None] = {}
    with runtime.store.reading() as conn:
        for tool in runtime.registry:
            row = stats.tool_stats(conn, runtime.registry, tool.name)
            latency[tool.name], success[tool.name] = row["latency_p50_s"], row["success_rate"]
    return latency, success


def rank(runtime: Runtime, body: dict[str, Any]) -> list[routing.Candidate]:
    strategy = body.get("strategy") or "lexical"
    latency, success = measured(runtime) if strategy in ("cost", "capability") else ({}, {})
    return routing.route(
        runtime.registry,
        task=str(body.get("task") or ""),
        strategy=str(strategy),
        capability=body.get("capability"),
        budget=body.get("budget"),
        rules=runtime.routing_rules,
        latency_s=latency,
        success=success,
    )


@router.post("/v1/route")
async def route(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    """``{task, capability?, budget?, strategy?}`` → ranked ``candidates`` with score and reason."""
    from ..errors import BadRequest

    runtime = runtime_of(request)
    if not who.has(Role.AGENT):
        raise Forbidden("agent role required to route")
    body = object_body(await request.body(), limit=64 * 1024, allowed=ROUTE_FIELDS)
    for field in ("task", "capability", "strategy"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise BadRequest(f"{field} must be a string")
    if body.get("budget") is not None and not isinstance(body["budget"], dict):
        raise BadRequest("budget must be an object")
    limit = body.get("limit", 10)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
        raise BadRequest("limit must be an integer between 1 and 100")
    candidates = await blocking(rank, runtime, body)
    return {
        "ok": True,
        "strategy": body.get("strategy") or "lexical",
        "candidates": [c.to_dict() for c in candidates[:limit]],
    }
