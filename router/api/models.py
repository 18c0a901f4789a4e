"""Schemas for the OpenAPI document. Bodies are parsed by ``bodies``; these describe them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..approval.model import MAX_REASON_CHARS
from ..results import REJECTED
from ..status import CallStatus
from .dry_run_models import DryRun

# What a call result's ``status`` may be: a call's status, or a call refused at submission.
RESULT_STATUSES: list[Any] = [*(str(status) for status in CallStatus), REJECTED]


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its nested models written in place: for schemas a route
    declares itself (``openapi_extra``), which FastAPI does not add to the document's
    components, so a ``$ref`` to them would point at nothing."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(definitions[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


def _without_default(schema: dict[str, Any]) -> None:
    """For a field that may be left out but, when given, must not be null."""
    schema.pop("default", None)
    alternatives = schema.pop("anyOf", [])
    schema.update(next((s for s in alternatives if s.get("type") != "null"), {}))


class CallRequest(BaseModel):
    """A call names its tool, or a capability for the router to choose the tool by."""

    model_config = ConfigDict(
        extra="forbid",
        # Exactly one of the two: both, or neither, is answered 422.
        json_schema_extra={"oneOf": [{"required": ["tool"]}, {"required": ["capability"]}]},
    )

    tool: str | None = Field(
        default=None, description="Name of a registered tool", json_schema_extra=_without_default
    )
    capability: str | None = Field(
        default=None,
        json_schema_extra=_without_default,
        description=(
            "A capability (such as `search.web`) instead of a tool: the best-ranked tool with "
            "it that takes these arguments runs, the rest of the ranking (ungated tools) being "
            "its fallbacks"
        ),
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments, one JSON object")
    idempotency_key: str | None = Field(
        default=None,
        max_length=256,
        description=(
            "Sent again with the same tool and arguments, answers with the call it first made "
            "(with others: 409); or the `Idempotency-Key` header"
        ),
    )
    wait_s: float | None = Field(default=None, ge=0, description="Wait this long for the outcome")
    dry_run: bool = Field(
        default=False,
        description=(
            "Submit nothing: answer with a `DryRun`, what submitting would do (`wait_s` is ignored)"
        ),
    )


class CallResultModel(BaseModel):
    """A call result: `ok` with `value`, or why not, with the fields its status names."""

    ok: bool = Field(description="True exactly when the call succeeded; then `value` is set")
    call_id: str | None = Field(default=None, description="Absent when the call was rejected")
    tool: str | None = Field(
        description="The tool called; for a call by capability, the one chosen"
    )
    status: str = Field(
        description="The call's status, or `rejected` when it was refused at submission",
        json_schema_extra={"enum": RESULT_STATUSES},
    )
    answered_by: str | None = Field(
        default=None, description="The fallback that answered, when it is not `tool`"
    )
    value: Any = Field(default=None, description="The tool's result, when `ok`")
    content: list[dict[str, Any]] | None = Field(
        default=None,
        description=(
            "With `value`, for a tool imported from an MCP server whose answer is more than "
            "plain text: every content block it gave (text, image, audio, resource, "
            "resource_link), in order, as MCP sends them"
        ),
    )
    error: str | None = Field(default=None, description="Why the call did not succeed")
    error_type: str | None = Field(
        default=None, description="The class of the failure, such as `TimeoutError`"
    )
    edited: bool | None = Field(default=None, description="`true` when an approver edited `args`")
    args: dict[str, Any] | None = Field(default=None, description="With `edited`: what runs")
    edited_by: str | None = Field(default=None, description="With `edited`: the approver")
    pending: bool | None = Field(default=None, description="`true` while it waits for approval")
    denied: bool | None = Field(default=None, description="`true` when an approver denied it")
    expired: bool | None = Field(
        default=None, description="`true` when its approval request expired"
    )
    request_id: str | None = Field(
        default=None, description="The approval request, with `pending`, `denied` or `expired`"
    )
    did_you_mean: list[str] | None = Field(
        default=None,
        description="For an unknown tool: registered tool names close to the one asked for",
    )


class ErrorModel(BaseModel):
    ok: bool = False
    error: str


CALL_REQUEST_SCHEMA = inline_schema(CallRequest)
# The header a caller may send instead of ``idempotency_key`` in the body.
IDEMPOTENCY_KEY_HEADER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "maxLength": 256},
}
Responses = dict[int | str, dict[str, Any]]


def errors(*codes: int) -> Responses:
    """The refusals a route answers, each ``ErrorModel``. Every route with a key answers
    401 without a valid one, and 503 when the database cannot look the key up. FastAPI
    lists 422 for any route with a parameter; declared, the document has its real shape."""
    return {code: {"model": ErrorModel} for code in codes}


# ``POST /v1/calls`` answers a call result, or with ``dry_run`` an explanation.
SUBMIT_RESPONSES: Responses = {
    200: {"model": CallResultModel | DryRun},
    **errors(401, 403, 409, 413, 422, 503),
}
CALL_READ_RESPONSES: Responses = {
    200: {"model": CallResultModel},
    **errors(401, 404, 422, 503),
}
CANCEL_RESPONSES: Responses = {
    200: {"model": CallResultModel},
    **errors(401, 404, 409, 422, 503),
}


class DecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS)
    wait_s: float | None = Field(default=None, ge=0, description="approve only: wait for the call")
    args: dict[str, Any] | None = Field(default=None, description="approve only: edited arguments")
    expected_args_sha256: str | None = Field(
        default=None, description="approve only: 409 unless the arguments still have this hash"
    )


class DecisionAnswer(BaseModel):
    ok: bool
    status: str
    request_id: str
    call_id: str
    approvals: int | None = None
    approvals_required: int | None = None
    released: bool | None = None
    edited: bool | None = None
    args_sha256: str | None = None


DECISION_REQUEST_SCHEMA = DecisionRequest.model_json_schema()
DECISION_RESPONSES: Responses = {
    200: {"model": DecisionAnswer},
    **errors(401, 403, 404, 409, 413, 422, 503),
}


class BatchCall(BaseModel):
    """One call of a batch (a JSON object in ``calls``, or one NDJSON line)."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="Name of a registered tool")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments, one JSON object")
    idempotency_key: str | None = Field(
        default=None, max_length=256, description="The call's own key, as for a single call"
    )


class BatchRequest(BaseModel):
    """A batch as one JSON object; a call that is not a valid ``BatchCall`` is rejected by
    its index in the answer, the others still taken."""

    model_config = ConfigDict(extra="forbid")

    calls: list[BatchCall] = Field(min_length=1, description="The calls, in batch order")
    idempotency_key: str | None = Field(
        default=None,
        max_length=256,
        description="Names the batch, so a later request with it adds to the same batch",
    )


class BatchRejection(BaseModel):
    index: int = Field(description="The call's place in this request")
    error: str = Field(description="Why it was rejected")


class BatchReplay(BaseModel):
    index: int = Field(description="The entry's place in this request")
    call_id: str = Field(description="The call stored before that the entry is")


class BatchReceipt(BaseModel):
    """What one submission did."""

    ok: bool
    batch_id: str
    total: int = Field(description="Calls in this request")
    accepted: int = Field(description="Of them, stored as new calls")
    replayed: int = Field(description="Of them, already stored under their idempotency keys")
    rejected: list[BatchRejection] = Field(description="Of them, refused, by index")
    replayed_elsewhere: list[BatchReplay] = Field(
        description=(
            "Of the replayed, those whose call is outside this batch (submitted alone or in "
            "another batch): the batch's status and results do not show it; read it with "
            "`GET /v1/calls/{call_id}`"
        )
    )


class BatchStatus(BaseModel):
    """Where a batch's calls stand."""

    ok: bool
    batch_id: str
    requested_by: str = Field(description="The key that submitted it")
    created_at: int = Field(description="When, in milliseconds since the epoch")
    total: int = Field(description="Calls in the batch")
    counts: dict[str, int] = Field(description="Those calls by status, every status named")
    submitted: int = Field(description="Calls received over every request, rejected or not")
    rejected: int = Field(description="Of those, rejected")
    done: bool = Field(description="True once none is queued, running or pending")


class BatchResultLine(CallResultModel):
    """One line of a batch's results: a call result and the call's place in the batch."""

    index: int = Field(description="The call's place in this request")


BATCH_REQUEST_SCHEMA = inline_schema(BatchRequest)
BATCH_CALL_SCHEMA = inline_schema(BatchCall)
BATCH_RESULT_LINE_SCHEMA = inline_schema(BatchResultLine)
BATCH_RESPONSES: Responses = {
    200: {"model": BatchReceipt},
    **errors(401, 403, 409, 413, 422, 503),
}
# Reading a batch: another key's batch is as unknown as one that never was.
BATCH_READ_RESPONSES: Responses = {
    200: {"model": BatchStatus},
    **errors(401, 404, 422, 503),
}
