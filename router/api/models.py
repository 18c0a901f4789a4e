"""Schemas for the OpenAPI document. Bodies are parsed by ``bodies``; these describe them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..approval.model import MAX_REASON_CHARS
from ..results import REJECTED
from ..status import CallStatus

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


class DryRunRefusal(BaseModel):
    """How a submission would be refused, as its answer would say."""

    status: str = Field(
        description=(
            "`rejected` (answered 200 and audited), `conflict` (an idempotency key reused "
            "with other arguments) or `bad_request` (arguments over the size limit); a "
            "malformed body or idempotency key is a 422 as for a submission, not a dry run"
        ),
        json_schema_extra={"enum": [REJECTED, "conflict", "bad_request"]},
    )
    http_status: int = Field(description="The HTTP code the submission would answer with")
    error: str = Field(description="The error it would answer with, word for word")
    did_you_mean: list[str] = Field(
        description="For an unknown tool: registered tool names close to it (else empty)"
    )


class DryRunQueue(BaseModel):
    """The risk queue the call's run message would go to (a gated call's, once released)."""

    name: str = Field(description="The Celery queue, `tools.<risk>`, that workers serve")
    key: str = Field(description="The Redis list it waits in, under the deployment's namespace")


class DryRunRule(BaseModel):
    """One rule that gates the call."""

    kind: str = Field(
        description="What kind of rule: `tool_config` (the tool's own config) or `condition` "
        "(a CEL rule over the arguments and caller, listed even when it lets the call run)"
    )
    name: str = Field(description="Which rule of that kind: the tool whose config holds it")
    why: str = Field(
        description="Why it applies, such as `requires_approval: true`, or a condition's key, "
        "text and value (`requires_approval: args.amount > 1000 → true`)"
    )


class DryRunApproval(BaseModel):
    """Whether the call would wait for approval, from whom, and why."""

    required: bool = Field(description="True when the call would be stored `pending`")
    approvers: list[str] = Field(
        description="Roles whose keys could decide (never the requesting key); empty if none"
    )
    approvals_required: int = Field(description="Distinct approvals that release it; 0 if none")
    timeout_s: float | None = Field(description="Seconds the request would wait before expiry")
    rules: list[DryRunRule] = Field(
        description="The rules that decide it; empty when none does (an ungated tool)"
    )


class DryRunRateLimit(BaseModel):
    """The tool's token bucket now, read without taking a token."""

    limit: str = Field(description="The tool's `rate_limit`, such as `2/s`")
    capacity: int = Field(description="Tokens the bucket holds when full")
    remaining: int = Field(description="Whole tokens free now")
    passes_now: bool = Field(
        description="True when a run now would get a token; else it would wait in the broker"
    )
    wait_s: float = Field(description="Seconds until a token is free; 0 when one is")


class DryRunCache(BaseModel):
    """The tool's result cache for these exact arguments."""

    ttl_s: float = Field(description="The tool's `cache_ttl_s`")
    hit: bool = Field(description="True when a run now would be answered from the cache")


class DryRunCandidate(BaseModel):
    """One tool with the capability, in ranking order."""

    tool: str = Field(description="The tool")
    score: float = Field(description="Its score in the `capability` ranking")
    reason: str = Field(description="Why it ranks there")
    takes_args: bool = Field(description="Whether it takes these arguments")


class DryRunCapability(BaseModel):
    """For a call by capability: the ranking the tool is chosen from."""

    name: str = Field(description="The capability asked for")
    ranking: list[DryRunCandidate] = Field(description="Every tool with it, best first")


class DryRunFallbackNotTried(BaseModel):
    """A fallback the failed call would skip, as the worker would skip it."""

    tool: str = Field(description="The fallback")
    why: str = Field(description="Why it would not be tried with these arguments")


class DryRun(BaseModel):
    """What submitting the call would do, with nothing done. Sections that do not apply
    are `null`: after a refusal or a replay, nothing more would happen."""

    ok: bool = Field(description="Always true: the explanation was given; see `outcome`")
    dry_run: bool = Field(description="Always true: nothing was submitted")
    outcome: str = Field(
        description=(
            "`queued` (it would run), `pending` (it would wait for approval), `replayed` "
            "(its idempotency key already names a call) or `refused`"
        ),
        json_schema_extra={"enum": ["queued", "pending", "replayed", "refused"]},
    )
    tool: str | None = Field(
        description="The tool; for a call by capability, the one that would be chosen"
    )
    capability: DryRunCapability | None = Field(description="For a call by capability")
    refused: DryRunRefusal | None = Field(description="With outcome `refused`")
    replay: dict[str, Any] | None = Field(
        description="With outcome `replayed`: the call result the submission would answer with"
    )
    queue: DryRunQueue | None = Field(description="With outcome `queued` or `pending`")
    approval: DryRunApproval | None = Field(description="With outcome `queued` or `pending`")
    rate_limit: DryRunRateLimit | None = Field(description="When the tool has a `rate_limit`")
    cache: DryRunCache | None = Field(description="When the tool has a `cache_ttl_s`")
    fallbacks: list[str] = Field(
        description=(
            "Tools tried in turn if the call fails for good: a capability's chain, else the "
            "tool's `fallbacks`, less those in `fallbacks_not_tried`"
        )
    )
    fallbacks_not_tried: list[DryRunFallbackNotTried] = Field(description="Fallbacks it would skip")


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
    index: int = Field(description="The call's place in the batch")
    error: str = Field(description="Why it was rejected")


class BatchReceipt(BaseModel):
    """What one submission did."""

    ok: bool
    batch_id: str
    total: int = Field(description="Calls in this request")
    accepted: int = Field(description="Of them, stored as new calls")
    replayed: int = Field(description="Of them, already stored under their idempotency keys")
    rejected: list[BatchRejection] = Field(description="Of them, refused, by index")


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

    index: int = Field(description="The call's place in the batch")


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
