"""Schemas for the OpenAPI document. Bodies are parsed by ``bodies``; these describe them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class CallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="Name of a registered tool")
    args: dict[str, Any] = Field(default_factory=dict, description="Arguments, one JSON object")
    idempotency_key: str | None = Field(default=None, max_length=256)
    wait_s: float | None = Field(default=None, ge=0, description="Wait this long for the outcome")


class CallResultModel(BaseModel):
    ok: bool
    call_id: str | None = None
    tool: str | None = None
    status: str | None = None
    value: Any = None
    error: str | None = None
    error_type: str | None = None
    pending: bool | None = None
    denied: bool | None = None
    expired: bool | None = None
    request_id: str | None = None


class ErrorModel(BaseModel):
    ok: bool = False
    error: str


CALL_REQUEST_SCHEMA = CallRequest.model_json_schema()
_ERROR = {"model": ErrorModel}
CALL_RESULT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": CallResultModel},
    401: _ERROR,
    404: _ERROR,
    409: _ERROR,
    413: _ERROR,
    422: _ERROR,
    503: _ERROR,
}


class DecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=2000)
    wait_s: float | None = Field(default=None, ge=0, description="approve only: wait for the call")


class DecisionAnswer(BaseModel):
    ok: bool
    status: str
    request_id: str
    call_id: str
    approvals: int | None = None
    approvals_required: int | None = None
    released: bool | None = None


DECISION_REQUEST_SCHEMA = DecisionRequest.model_json_schema()
DECISION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": DecisionAnswer},
    401: _ERROR,
    403: _ERROR,
    404: _ERROR,
    409: _ERROR,
    422: _ERROR,
    503: _ERROR,
}


class BatchCall(BaseModel):
    """One call of a batch (a JSON object in ``calls``, or one NDJSON line)."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="Name of a registered tool")
    args: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, max_length=256)


class BatchRejection(BaseModel):
    index: int
    error: str


class BatchReceipt(BaseModel):
    ok: bool
    batch_id: str
    total: int
    accepted: int
    replayed: int
    rejected: list[BatchRejection]


BATCH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": BatchReceipt},
    401: _ERROR,
    403: _ERROR,
    404: _ERROR,
    413: _ERROR,
    422: _ERROR,
    503: _ERROR,
}
