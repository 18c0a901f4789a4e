"""``/v1/approvals``: what waits for an approver, and their decisions."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import WithJsonSchema

from ..approval.model import MAX_REASON_CHARS, Decision
from ..auth.principal import Principal
from ..canonical import SHA256_HEX
from ..dispatch.checks import EditRefused
from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    Unavailable,
)
from ..messaging.waiting import wait_for_call
from .bodies import decision_body_bytes, int_param, object_body, optional_string, wait_seconds
from .deps import in_thread, principal, runtime_of
from .models import DECISION_REQUEST_SCHEMA, DECISION_RESPONSES, errors
from .responses import AsciiJSONResponse

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

# Approve and deny take the same optional body and give the same answers.
DECISION_ROUTE: dict[str, Any] = {
    "responses": DECISION_RESPONSES,
    "openapi_extra": {
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": DECISION_REQUEST_SCHEMA}},
        }
    },
}

DECISION_FIELDS = {
    Decision.APPROVE: frozenset({"reason", "wait_s", "args", "expected_args_sha256"}),
    Decision.DENY: frozenset({"reason"}),
}
APPROVALS_PAGE_MAX = 500
# Parsed by ``int_param`` for its own messages; an integer to the document.
PageSize = Annotated[
    str | None,
    Query(description="Requests at most; 200 unless given"),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": APPROVALS_PAGE_MAX}),
]
REFUSALS = {403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge, 422: BadRequest}


@router.get("", responses=errors(401, 403, 422, 503))
async def list_requests(
    request: Request,
    status: str = "pending",
    limit: PageSize = None,
    who: Principal = Depends(principal),
) -> dict[str, Any]:
    """Requests this key may read, those it may decide (operators see all): pending ones
    oldest first, decided ones most recently decided first."""
    view = runtime_of(request).approvals_view
    if not (who.is_approver or who.is_operator):
        raise Forbidden("approver or operator role required to list approval requests")
    count = int_param(limit, "limit", default=200, low=1, high=APPROVALS_PAGE_MAX)
    return {"ok": True, "requests": await in_thread(view.list_requests, who, status, count)}


@router.get("/{request_id}", responses=errors(401, 404, 422, 503))
async def get_request(
    request: Request, request_id: str, who: Principal = Depends(principal)
) -> dict[str, Any]:
    """The request and its decisions so far."""
    view = runtime_of(request).approvals_view
    return {"ok": True, "request": await in_thread(view.get, who, request_id)}


async def _decide(
    request: Request, request_id: str, who: Principal, decision: Decision
) -> JSONResponse:
    runtime = runtime_of(request)
    raw = await request.body()
    limit = decision_body_bytes(runtime.settings)
    body = object_body(raw, limit=limit, allowed=DECISION_FIELDS[decision]) if raw.strip() else {}
    reason = optional_string(body, "reason", max_len=MAX_REASON_CHARS)
    wait_s = wait_seconds(body.get("wait_s"), maximum=runtime.settings.max_wait_s)
    args = body.get("args")
    if args is not None and not isinstance(args, dict):
        raise BadRequest("args must be a JSON object: the arguments as edited")
    expected = body.get("expected_args_sha256")
    if expected is not None and not (isinstance(expected, str) and SHA256_HEX.fullmatch(expected)):
        raise BadRequest("expected_args_sha256 must be 64 lower-case hex digits")
    pending = await in_thread(runtime.approvals_view.precheck, who, request_id)
    if args is not None:
        # Refused here as the approval worker would refuse it, before anything is sent.
        checks = runtime.dispatcher.checks
        edit = await in_thread(checks.check_edit, pending.requested_by, pending.tool, args)
        if isinstance(edit, EditRefused):
            raise REFUSALS[edit.http_status](edit.error)
    edits = None
    if decision is Decision.APPROVE:
        # Bound to the arguments as read now, when the approver named none, and to their
        # edits so far: an approval replayed from Redis after another approver's edit (or
        # an edit and one back) is refused, not counted. (A denial ends the request
        # whatever its arguments.)
        expected, edits = expected or pending.args_sha256, pending.edits
    send = functools.partial(runtime.decisions.send, expected_edits=edits)
    answer = await in_thread(send, request_id, who.name, decision, reason, args, expected)
    if not answer.get("ok"):
        code = int(answer.get("http_status", 503))
        error = str(answer.get("error", "decision failed"))
        if code in REFUSALS:
            raise REFUSALS[code](error)
        raise Unavailable(error.removeprefix("unavailable: "))
    answer.pop("http_status", None)
    if wait_s > 0 and answer.get("released"):
        call_id = str(answer["call_id"])
        try:
            result = await wait_for_call(
                request.app.state.listener,
                call_id,
                lambda: runtime.calls.read(call_id),
                wait_s,
                known_unfinished=True,
            )
            await principal(request)  # a key revoked during the wait gets no outcome
        except (StoreUnavailable, asyncio.CancelledError):
            # The decision is applied: told so, without the outcome, never as a failure (nor
            # a 500 when the server's stop outlasts the wait).
            return AsciiJSONResponse(answer)
        return AsciiJSONResponse(result.to_dict())
    return AsciiJSONResponse(answer)


@router.post("/{request_id}/approve", **DECISION_ROUTE)
async def approve(
    request: Request, request_id: str, who: Principal = Depends(principal)
) -> JSONResponse:
    """Approve; answers once the approval worker has decided. With ``wait_s``, waits on for
    the call's outcome and answers with the call result."""
    return await _decide(request, request_id, who, Decision.APPROVE)


@router.post("/{request_id}/deny", **DECISION_ROUTE)
async def deny(
    request: Request, request_id: str, who: Principal = Depends(principal)
) -> JSONResponse:
    """Deny; one denial ends the request."""
    return await _decide(request, request_id, who, Decision.DENY)
