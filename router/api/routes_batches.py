"""``/v1/batches``: submit many calls at once (JSON or NDJSON), read counts and results."""

from __future__ import annotations

import functools
import io
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from ..auth.principal import Principal
from ..dispatch.batch_entries import Malformed, Unread
from ..dispatch.batches import BatchService
from ..errors import BadRequest, Forbidden, PayloadTooLarge
from ..json_input import past_limit, too_large
from ..status import Role
from .batch_json import json_calls
from .bodies import idempotency_key
from .deps import in_thread, principal, runtime_of
from .models import (
    BATCH_CALL_SCHEMA,
    BATCH_READ_RESPONSES,
    BATCH_REQUEST_SCHEMA,
    BATCH_RESPONSES,
    BATCH_RESULT_LINE_SCHEMA,
    IDEMPOTENCY_KEY_HEADER,
)

router = APIRouter(prefix="/v1/batches", tags=["batches"])

BATCH_FIELDS = frozenset({"calls", "idempotency_key"})
NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/ndjson")
MAX_OFFSET = 2**53
# Parsed by ``offset_param`` for its own message; an integer to the document.
Offset = Annotated[
    str | None,
    Query(description="Index of this request's first call; else after the batch's last call"),
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}),
]


def service(request: Request) -> BatchService:
    runtime = runtime_of(request)
    return BatchService(runtime.store, runtime.dispatcher, clock=runtime.clock)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` (not after reading it all)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise past_limit(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def ndjson_calls(raw: bytes, *, line_limit: int, max_calls: int) -> list[object]:
    """One call per non-blank line, kept as its text (parsed when its chunk is checked); a
    line over ``line_limit`` is rejected at its index. More than ``max_calls`` lines are
    refused before any is kept."""
    if raw.count(b"\n") >= max_calls:  # then there may be too many: count them
        count = sum(1 for line in io.BytesIO(raw) if line.strip())
        if count > max_calls:
            raise PayloadTooLarge(f"too many calls: {count}, over the limit of {max_calls}")
    items: list[object] = []
    for line in io.BytesIO(raw):
        if not line.strip():
            continue
        text = line.rstrip(b"\n")
        if len(text) > line_limit:
            items.append(Malformed(f"call is {len(text)} bytes, over the limit of {line_limit}"))
        else:
            items.append(Unread(text))
    return items


def offset_param(value: str | None) -> int | None:
    if value is None:
        return None
    # isdigit alone admits digits int() refuses, such as "³".
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_OFFSET:
        raise BadRequest(f"offset must be an integer between 0 and {MAX_OFFSET}")
    return int(value)


@router.post(
    "",
    responses=BATCH_RESPONSES,
    openapi_extra={
        "parameters": [IDEMPOTENCY_KEY_HEADER],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": BATCH_REQUEST_SCHEMA},
                # One call a line: the schema is each line's (FastAPI's own for JSON lines).
                "application/x-ndjson": {"itemSchema": BATCH_CALL_SCHEMA},
            },
        },
    },
)
async def submit_batch(
    request: Request, offset: Offset = None, who: Principal = Depends(principal)
) -> dict[str, Any]:
    """Submit up to ``TOOLROUTER_MAX_BATCH_CALLS`` calls: ``{"calls": [...]}`` or one call
    per NDJSON line. Each call is checked, stored and audited on its own; the answer names
    the rejected ones by index. ``Idempotency-Key`` (or ``idempotency_key``) names the batch,
    so a re-run adds to it; ``offset`` places this request's calls within the batch."""
    settings = runtime_of(request).settings
    if not who.has(Role.AGENT):
        raise Forbidden("agent role required to submit calls")
    start = offset_param(offset)
    raw = await read_body(request, settings.max_batch_bytes)
    # The body may take minutes to arrive: a key revoked meanwhile submits nothing.
    await principal(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body: dict[str, Any] = {}  # NDJSON: the key comes in the header alone
    if content_type in NDJSON_TYPES:
        # Off the event loop: parsing a large body line by line takes seconds.
        items = await in_thread(
            functools.partial(
                ndjson_calls,
                raw,
                line_limit=settings.call_body_bytes,
                max_calls=settings.max_batch_calls,
            )
        )
    else:
        # Off the event loop too, and counted as it is read (see ``batch_json``).
        body = await in_thread(
            functools.partial(
                json_calls,
                raw,
                limit=settings.max_batch_bytes,
                allowed=BATCH_FIELDS,
                max_calls=settings.max_batch_calls,
                entry_limit=settings.call_body_bytes,
            )
        )
        if "calls" not in body:
            raise BadRequest("missing field: calls")
        if not isinstance(body["calls"], list):
            raise BadRequest("calls must be a list")
        items = body["calls"]
    key = idempotency_key(body, request.headers.getlist("idempotency-key"))
    if not items:
        raise BadRequest("a batch needs at least one call")
    if len(items) > settings.max_batch_calls:
        raise PayloadTooLarge(
            f"too many calls: {len(items)}, over the limit of {settings.max_batch_calls}"
        )
    batches = service(request)
    receipt = await in_thread(lambda: batches.submit(who.name, items, key=key, offset=start))
    return receipt.to_dict()


@router.get("/{batch_id}", responses=BATCH_READ_RESPONSES)
async def batch_status(
    request: Request, batch_id: str, who: Principal = Depends(principal)
) -> dict[str, Any]:
    """Counts of the batch's calls by status; ``done`` once none is queued, running or pending."""
    return await in_thread(service(request).status, who, batch_id)


@router.get(
    "/{batch_id}/results",
    # The answer is streamed NDJSON, never FastAPI's default JSON: declared here alone.
    response_class=StreamingResponse,
    responses={
        **BATCH_READ_RESPONSES,
        200: {
            "description": "One call result a line, in batch order",
            "content": {"application/x-ndjson": {"itemSchema": BATCH_RESULT_LINE_SCHEMA}},
        },
    },
)
async def batch_results(
    request: Request, batch_id: str, who: Principal = Depends(principal)
) -> StreamingResponse:
    """NDJSON, one call result (SPEC §4) a line in batch order, each with its ``index``."""
    lines = await in_thread(service(request).results, who, batch_id)
    return StreamingResponse(lines, media_type="application/x-ndjson")
