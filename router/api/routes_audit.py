"""``/v1/audit``: the audit log for operators, and its verification."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..audit import log as audit
from ..auth.principal import Principal
from ..errors import BadRequest
from ..names import echo_name
from ..status import AuditEvent
from .bodies import check_call_id, int_param
from .deps import in_thread, principal, require_operator, runtime_of
from .models import errors
from .responses import AsciiJSONResponse

router = APIRouter(tags=["audit"])

AUDIT_PAGE_MAX = 1000


@router.get("/v1/audit", responses=errors(401, 403, 404, 422, 503))
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
    after = int_param(after_seq, "after_seq", default=0, low=0, high=2**62)
    count = int_param(limit, "limit", default=100, low=1, high=AUDIT_PAGE_MAX)
    store = runtime_of(request).store

    def read() -> list[dict[str, Any]]:
        with store.reading() as conn:
            return audit.query(
                conn, tool=tool, event=event, call_id=call_id, after_seq=after, limit=count
            )

    rows = await in_thread(read)
    return {"ok": True, "rows": rows, "next_after_seq": rows[-1]["seq"] if rows else after}


@router.get("/v1/audit/verify", responses=errors(401, 403, 503))
async def verify_audit(request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    """Check the audit log (operators only): the keyed chain, its signed head, checkpoints and
    archive segments. ``ok`` is false when anything does not hold; ``problems`` says where."""
    require_operator(who)
    report = await in_thread(runtime_of(request).verify_audit)
    return AsciiJSONResponse(report.to_dict())
