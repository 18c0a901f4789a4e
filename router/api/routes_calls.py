"""``/v1/calls``: submit, read (optionally waiting), cancel."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import WithJsonSchema

from ..auth.principal import Principal
from ..dispatch.submission import Submission
from ..errors import Forbidden, StoreUnavailable
from ..messaging.waiting import wait_for_call
from ..results import SHUTTING_DOWN, CallResult, bad_request, unavailable
from ..runtime import Runtime
from ..status import TERMINAL_STATES, Role
from .bodies import (
    check_call_id,
    idempotency_key,
    object_body,
    wait_seconds,
    wait_seconds_param,
)
from .deps import in_thread, principal, runtime_of
from .models import (
    CALL_READ_RESPONSES,
    CALL_REQUEST_SCHEMA,
    CANCEL_RESPONSES,
    IDEMPOTENCY_KEY_HEADER,
    SUBMIT_RESPONSES,
)
from .responses import AsciiJSONResponse

router = APIRouter(prefix="/v1/calls", tags=["calls"])

CALL_FIELDS = frozenset({"tool", "capability", "args", "idempotency_key", "wait_s", "dry_run"})
# Parsed by ``wait_seconds_param`` for its own messages; a number of seconds to the document.
WaitSeconds = Annotated[
    str | None,
    Query(description="Wait up to this long, at most `TOOLROUTER_MAX_WAIT_S`"),
    WithJsonSchema({"type": "number", "minimum": 0}),
]


def answer(result: CallResult) -> JSONResponse:
    return AsciiJSONResponse(result.to_dict(), status_code=result.http_status)


@router.post(
    "",
    openapi_extra={
        "parameters": [IDEMPOTENCY_KEY_HEADER],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": CALL_REQUEST_SCHEMA}},
        },
    },
    responses=SUBMIT_RESPONSES,
)
async def submit_call(request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    """Submit a tool call. Any well-formed request gets 200 and a call result.

    With ``"dry_run": true``, nothing is submitted: the answer is a ``DryRun``, what
    submitting would do (the tool, its queue, the approval it needs and why, a refusal, a
    replay, the rate limit, the cache, the fallbacks). Nothing is stored, published,
    audited or run, and no rate-limit token is taken; ``wait_s`` is ignored."""
    runtime = runtime_of(request)
    settings = runtime.settings
    if not who.has(Role.AGENT):
        raise Forbidden("agent role required to submit calls")
    # The body may carry JSON punctuation around the arguments; allow a little slack.
    body = object_body(await request.body(), limit=settings.call_body_bytes, allowed=CALL_FIELDS)
    await principal(request)  # a key revoked while its body arrived submits nothing
    if "capability" in body and "tool" in body:
        return answer(bad_request("give either tool or capability, not both"))
    by_capability = "capability" in body
    if by_capability and not isinstance(body["capability"], str):
        return answer(bad_request("capability must be a string"))
    if "tool" not in body and not by_capability:
        return answer(bad_request("missing field: tool"))
    if not by_capability and not isinstance(body["tool"], str):
        return answer(bad_request("tool must be a string"))
    wait_s = wait_seconds(body.get("wait_s"), maximum=settings.max_wait_s)
    key = idempotency_key(body, request.headers.getlist("idempotency-key"))
    args: Any = body.get("args", {})
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        return answer(bad_request("dry_run must be true or false"))
    if dry_run:
        return await explain(runtime, who, body, args, key)
    if by_capability:
        capability = body["capability"]
        ranking = await in_thread(functools.partial(runtime.ranker.rank, capability=capability))
        result = await in_thread(
            runtime.dispatcher.submit_by_capability,
            who.name,
            capability,
            [c.tool for c in ranking.candidates],
            args,
            key,
        )
    else:
        # Concurrent submissions share a transaction and a publish (router.dispatch.group_commit).
        submission = Submission(who.name, body["tool"], args, key, waited=wait_s > 0)
        result = await runtime.group_commit.submit(submission)
    unfinished = result.http_status == 200 and result.status not in TERMINAL_STATES
    if wait_s > 0 and result.call_id is not None and unfinished:
        call_id, accepted = result.call_id, result
        # Not read back at the end (the database gone meanwhile): read below, once on disk.
        try:
            result = await wait_for_call(
                request.app.state.listener,
                call_id,
                lambda: runtime.calls.get_accepted(who, call_id),
                wait_s,
                known_unfinished=True,
            )
        except StoreUnavailable:
            pass
        except asyncio.CancelledError:
            # The server's stop outlasted the wait: answered at once, not a 500. Not as
            # accepted: its commit may not be on disk yet, and nothing is waited for now.
            return answer(unavailable(SHUTTING_DOWN))
        if result.status not in TERMINAL_STATES:
            # Not finished in time: the call may have been accepted by a commit that did
            # not wait for the disk, so it is told as it stands once on disk.
            result = await in_thread(runtime.calls.accepted_on_disk, who, call_id)
        try:
            await principal(request)  # a key revoked during the wait gets no outcome
        except StoreUnavailable:
            result = accepted  # nor one whose key cannot be checked again
    return answer(result)


async def explain(
    runtime: Runtime, who: Principal, body: dict[str, Any], args: Any, key: str | None
) -> JSONResponse:
    """A dry run: what submitting would do, with nothing stored, published or run."""
    explainer = runtime.explainer
    if "capability" in body:
        ranking = await in_thread(
            functools.partial(runtime.ranker.rank, capability=body["capability"])
        )
        explained = await in_thread(
            explainer.explain_by_capability,
            who.name,
            body["capability"],
            ranking.candidates,
            args,
            key,
        )
    else:
        explained = await in_thread(explainer.explain, who.name, body["tool"], args, key)
    if isinstance(explained, CallResult):
        return answer(explained)
    return AsciiJSONResponse(explained)


@router.get("/{call_id}", responses=CALL_READ_RESPONSES)
async def get_call(
    request: Request,
    call_id: str,
    wait_s: WaitSeconds = None,
    who: Principal = Depends(principal),
) -> JSONResponse:
    """A call's result; with ``wait_s``, wait up to that long for it to finish."""
    runtime = runtime_of(request)
    check_call_id(call_id)
    seconds = wait_seconds_param(wait_s, maximum=runtime.settings.max_wait_s)
    if seconds > 0:
        try:
            result = await wait_for_call(
                request.app.state.listener,
                call_id,
                lambda: runtime.calls.get(who, call_id),
                seconds,
            )
        except asyncio.CancelledError:
            # The server's stop outlasted the wait: answered at once, not a 500.
            return answer(unavailable(SHUTTING_DOWN))
        await principal(request)  # a key revoked during the wait gets no outcome
    else:
        result = (await in_thread(runtime.calls.get, who, call_id)).result()
    return answer(result)


@router.delete("/{call_id}", responses=CANCEL_RESPONSES)
async def cancel_call(
    request: Request, call_id: str, who: Principal = Depends(principal)
) -> JSONResponse:
    """Cancel one of your own calls while it is still queued or pending."""
    runtime = runtime_of(request)
    check_call_id(call_id)
    result = await in_thread(runtime.calls.cancel, who, call_id)
    runtime_notifier = request.app.state.notifier
    await in_thread(runtime_notifier.call_done, call_id)
    return answer(result)
