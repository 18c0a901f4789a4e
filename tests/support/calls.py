"""Making calls in tests: over HTTP as an agent does, or through a runtime in-process."""

from __future__ import annotations

import re
from typing import Any

import httpx

from router.runtime import Runtime
from router.status import CallStatus

from .stack import Stack

REQUEST_ID = re.compile(r"^req-[0-9a-f]{32}$")


def submit(http: httpx.Client, tool: str, args: Any = None, **extra: Any) -> dict[str, Any]:
    """POST /v1/calls; a well-formed call request always answers 200 (SPEC §8)."""
    body = {"tool": tool, "args": {} if args is None else args, **extra}
    response = http.post("/v1/calls", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def submit_pending(
    stack: Stack, tool: str = "high_echo", key: str = "agent", args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A call of a gated tool, answered pending with its approval request."""
    with stack.client(key) as http:
        body = submit(http, tool, args or {"n": 1})
    assert body["status"] == "pending", body
    assert REQUEST_ID.match(body["request_id"])
    return body


def decide(
    stack: Stack, request_id: str, decision: str = "approve", key: str = "approver", **body: Any
) -> httpx.Response:
    with stack.client(key) as http:
        return http.post(f"/v1/approvals/{request_id}/{decision}", json=body)


def result(stack: Stack, call_id: str, wait_s: float = 20, key: str = "agent") -> dict[str, Any]:
    """The call's result, waited for up to ``wait_s``."""
    with stack.client(key) as http:
        response = http.get(f"/v1/calls/{call_id}", params={"wait_s": wait_s})
    return response.json()  # type: ignore[no-any-return]


def queue_call(runtime: Runtime, tool: str, args: dict[str, Any]) -> str:
    """A call accepted by the runtime's dispatcher in-process, as the API would; its id."""
    accepted = runtime.dispatcher.submit("agent", tool, args)
    assert accepted.status == CallStatus.QUEUED, accepted
    assert accepted.call_id is not None
    return accepted.call_id
