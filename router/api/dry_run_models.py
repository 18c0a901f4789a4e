"""Schemas of a dry run's answer for the OpenAPI document: what submitting a call would do."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..results import REJECTED


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
