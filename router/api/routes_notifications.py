"""``/v1/notifications``: deliveries of notifications to approvers, for operators who
need to see which failed and why."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import WithJsonSchema

from ..auth.principal import Principal
from ..errors import BadRequest
from ..names import echo_name
from ..notify import deliveries
from ..notify.model import DeliveryStatus, NotifyEvent
from .bodies import int_param
from .deps import in_thread, principal, require_operator, runtime_of
from .models import errors

router = APIRouter(tags=["notifications"])

PAGE_MAX = 500
# Parsed by ``int_param`` for its own messages; an integer to the document.
PageSize = Annotated[
    str | None,
    Query(description="Deliveries at most; 100 unless given"),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": PAGE_MAX}),
]

# Checked against ``NotifyEvent`` for its own message; the events to the document.
Event = Annotated[
    str | None,
    Query(description="Only deliveries telling this event"),
    WithJsonSchema({"type": "string", "enum": [str(event) for event in NotifyEvent]}),
]


@router.get("/v1/notifications", responses=errors(401, 403, 422, 503))
async def list_deliveries(
    request: Request,
    status: str | None = None,
    event: Event = None,
    request_id: str | None = None,
    limit: PageSize = None,
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    """Notification deliveries, latest first (operators only): ``status=failed`` lists
    those that gave up, with their attempts and last error; ``event=escalated`` those that
    told a request's escalation."""
    require_operator(who)
    try:
        wanted = DeliveryStatus(status) if status is not None else None
    except ValueError:
        raise BadRequest(f"unknown status: {echo_name(status)}") from None
    try:
        told = NotifyEvent(event) if event is not None else None
    except ValueError:
        raise BadRequest(f"unknown event: {echo_name(event)}") from None
    if request_id is not None and not (0 < len(request_id) <= 64 and request_id.isprintable()):
        raise BadRequest("request_id must be 1-64 printable characters")
    count = int_param(limit, "limit", default=100, low=1, high=PAGE_MAX)
    store = runtime_of(request).store

    def read() -> list[dict[str, Any]]:
        with store.reading() as conn:
            found = deliveries.recent(
                conn, status=wanted, event=told, request_id=request_id, limit=count
            )
        return [delivery.to_dict() for delivery in found]

    return {"ok": True, "deliveries": await in_thread(read)}
