"""``POST /v1/route``: ranked tools for a task, by strategy."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Depends, Request

from ..auth.principal import Principal
from ..constants import ROUTE_LIMIT
from ..errors import BadRequest, Forbidden
from ..status import Role
from .bodies import object_body
from .deps import in_thread, principal, runtime_of
from .models import errors

router = APIRouter(tags=["route"])

ROUTE_FIELDS = frozenset({"task", "capability", "budget", "strategy", "limit"})


@router.post("/v1/route", responses=errors(401, 403, 413, 422, 503))
async def route(request: Request, who: Principal = Depends(principal)) -> dict[str, Any]:
    """``{task, capability?, budget?, strategy?, limit?}`` → the ``strategy`` used and ranked
    ``candidates`` with score and reason (and ``fallback`` when ``llm`` could not rank)."""
    runtime = runtime_of(request)
    if not who.has(Role.AGENT):
        raise Forbidden("agent role required to route")
    body = object_body(await request.body(), limit=64 * 1024, allowed=ROUTE_FIELDS)
    for field in ("task", "capability", "strategy"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise BadRequest(f"{field} must be a string")
    task = str(body.get("task") or "")
    if not task.isascii():
        try:
            task.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest("task must be text: it holds a lone surrogate") from None
    limit = body.get("limit", ROUTE_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100:
        raise BadRequest("limit must be an integer between 1 and 100")
    ranking = await in_thread(
        functools.partial(
            runtime.ranker.rank,
            task=task,
            strategy=body.get("strategy"),
            capability=body.get("capability"),
            budget=body.get("budget"),
            limit=limit,
        )
    )
    return ranking.answer(limit)
