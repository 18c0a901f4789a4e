"""``/v1/audit``: the audit log for operators, and its verification."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import WithJsonSchema

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
SEQ_MAX = 2**62
# Parsed by ``int_param`` for its own messages; integers to the document.
AfterSeq = Annotated[
    str | None,
    Query(description="Rows after this `seq`; 0 unless given"),
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": SEQ_MAX}),
]
PageSize = Annotated[
    str | None,
    Query(description="Rows at most; 100 unless given"),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": AUDIT_PAGE_MAX}),
]


@router.get("/v1/audit", responses=errors(401, 403, 404, 422, 503))
async def read_audit(
    request: Request,
    tool: Annotated[str | None, Query(description="Only this tool's rows")] = None,
    event: Annotated[str | None, Query(description="Only rows of this audit event")] = None,
    call_id: Annotated[str | None, Query(description="Only this call's rows")] = None,
    after_seq: AfterSeq = None,
    limit: PageSize = None,
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    """Audit rows in order (operators only). Page with ``after_seq`` = the last ``seq`` seen."""
    require_operator(who)
    if event is not None and event not in AuditEvent.__members__.values():
        raise BadRequest(f"unknown event: {echo_name(event)}")
    if tool is not None and not (0 < len(tool) <= 256 and tool.isprintable()):
        raise BadRequest("tool must be 1-256 printable characters")
    if call_id is not None:
        check_call_id(call_id)
    after = int_param(after_seq, "after_seq", default=0, low=0, high=SEQ_MAX)
    count = int_param(limit, "limit", default=100, low=1, high=AUDIT_PAGE_MAX)
    store = runtime_of(request).store

    def read() -> list[dict[str, Any]]:
        with store.reading() as conn:
            return audit.query(
                conn, tool=tool, event=event, call_id=call_id, after_seq=after, limit=count
            )

    rows = await in_thread(read)
    return {"ok": True, "rows": rows, "next_after_seq": rows[-1]["seq"] if rows else after}


@router.get("/v1/audit/verify", responses=errors(401, 403, 422, 503))
async def verify_audit(request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    """Check the audit log (operators only): the keyed chain, its signed head, checkpoints and
    archive segments. ``ok`` is false when anything does not hold; ``problems`` says where."""
    require_operator(who)
    report = await in_thread(runtime_of(request).verify_audit)
    return AsciiJSONResponse(report.to_dict())
