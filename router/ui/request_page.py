"""``/ui/requests/{id}``: one pending request on a page of its own, its arguments whole.

The list cuts long arguments (``router.ui.cards``) and offers no approval or edit on such
a card; this page is where the approver reads them all and does either. A request the key may not
decide, or that is no longer pending, is told as the API tells it: unknown, or decided.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..approval.requests import RequestStatus
from ..errors import NotFound
from ..names import echo_name
from ..threads import in_thread
from .cards import fill_card, may_open
from .routes import _page, _runtime, _sessions, approver_page

router = APIRouter(prefix="/ui/requests", include_in_schema=False)


@router.get("/{request_id}", response_class=HTMLResponse)
async def one_request(request: Request, request_id: str) -> Response:
    signed_in = await approver_page(request)
    if isinstance(signed_in, Response):
        return signed_in
    current, who = signed_in
    runtime = _runtime(request)
    csrf = _sessions(request).csrf(current)
    unknown = f"unknown request: {echo_name(request_id)}"
    try:
        item = await in_thread(runtime.approvals_view.get, who, request_id)
    except NotFound:
        return _page(request, "request.html", 404, who=who, csrf=csrf, gone=unknown)
    if item["status"] != RequestStatus.PENDING or item["expires_in_ms"] <= 0:
        # Told to a key that may read it (as the API tells it). Past its expiry and not
        # yet swept: expired all the same.
        status = item["status"] if item["status"] != RequestStatus.PENDING else "expired"
        gone = f"{item['request_id']} is no longer pending: {status}"
        return _page(request, "request.html", 404, who=who, csrf=csrf, gone=gone)
    if not may_open(item, who):
        return _page(request, "request.html", 404, who=who, csrf=csrf, gone=unknown)
    fill_card(item, runtime.registry, who, whole=True)
    return _page(request, "request.html", who=who, csrf=csrf, item=item, now_ms=runtime.clock())
