"""One nesting limit at every way in, attacked from outside against real processes on both
databases: arguments over HTTP, in batches and over MCP nested past the limit.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx

from ..support.inbox import (
    inbox_page,
    is_inbox_of,
    session_cookie,
    sign_in,
)
from ..support.stack import Stack
from ..support.trust import (
    ARGS_TOO_DEEP,
    JSON,
    LIMIT,
    audit_by,
    backend_of,
    call_rows_by,
    depth_of,
    eventually,
    finished,
    nested_args,
    nested_args_json,
    new_key,
    post_call,
)
from .test_mcp_server import mcp_session, run, text_of


def test_arguments_nested_past_the_limit_are_rejected_naming_it(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    answers: dict[int, tuple[int, dict[str, Any]]] = {}
    for depth in (LIMIT + 1, 500, 1_000, 10_000):
        content = f'{{"tool": "echo", "args": {nested_args_json(depth)}}}'.encode()
        response = post_call(stack, token, content)
        assert response.status_code != 500, response.text[:300]
        assert response.headers["content-type"].startswith("application/json")
        answers[depth] = (response.status_code, response.json())
    # Parsed, then rejected by the limit: a rejected call (HTTP 200), naming the limit.
    for depth in (LIMIT + 1, 500):
        status, body = answers[depth]
        assert status == 200, (depth, body)
        assert body == {"ok": False, "tool": "echo", "status": "rejected", "error": ARGS_TOO_DEEP}
    # Deeper than the JSON parser itself descends (Python's recursion limit, 1,000 frames,
    # with the body and its arguments inside it): refused as a malformed body, before any
    # call exists, so not audited.
    for depth in (1_000, 10_000):
        status, body = answers[depth]
        assert (status, body) == (422, {"ok": False, "error": "malformed body: nested too deeply"})
    # Nothing stored; each well-formed attempt audited as invalid, naming the limit.
    assert call_rows_by(stack, name) == 0
    audited = audit_by(stack, name)
    assert [(event, tool) for event, tool, _ in audited] == [("invalid", "echo")] * 2
    assert all(ARGS_TOO_DEEP in (detail or "") for _, _, detail in audited)

    # At the limit exactly: accepted, run, and its value (as deep) comes back.
    at_limit = nested_args_json(LIMIT)
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        accepted = http.post(
            "/v1/calls", content=f'{{"tool": "echo", "args": {at_limit}}}'.encode(), headers=JSON
        ).json()
        assert accepted["status"] in ("queued", "succeeded"), accepted
        done = finished(http, accepted["call_id"])
    assert done["status"] == "succeeded" and depth_of(done["value"]) == LIMIT, done["status"]

    # A gated request at the limit waits in the inbox, and everything that shows it answers.
    with stack.client("agent") as http:
        gated = http.post(
            "/v1/calls",
            content=f'{{"tool": "high_echo", "args": {at_limit}}}'.encode(),
            headers=JSON,
        ).json()
    assert gated["status"] == "pending", gated
    with stack.client("approver") as http:
        listed = http.get("/v1/approvals", params={"limit": 200})
        assert listed.status_code == 200, listed.text[:300]
        assert gated["request_id"] in listed.text
        one = http.get(f"/v1/approvals/{gated['request_id']}")
        assert one.status_code == 200 and depth_of(one.json()["request"]["args"]) == LIMIT
    cookie = session_cookie(sign_in(stack.base_url, stack.keys["approver"]))
    inbox = inbox_page(stack.base_url, cookie)
    assert is_inbox_of(inbox, "approver") and gated["request_id"] in inbox.text
    with stack.client("approver") as http:
        denied = http.post(f"/v1/approvals/{gated['request_id']}/deny", json={"reason": "test"})
    assert denied.status_code == 200, denied.text
    print(
        f"[{backend}] nesting: "
        + ", ".join(
            f"{depth:,}-deep -> HTTP {answers[depth][0]} "
            + answers[depth][1].get("status", repr(answers[depth][1]["error"]))
            for depth in answers
        )
        + f"; call rows 0, audit {len(audited)}x invalid naming the limit; "
        f"{LIMIT}-deep -> {done['status']}; /v1/approvals {listed.status_code}, "
        f"inbox {inbox.status_code} with a {LIMIT}-deep request on it"
    )


def test_a_batch_counts_a_too_deep_call_as_rejected(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    deep = nested_args_json(LIMIT + 1)
    as_json = (
        '{"calls": [{"tool": "echo", "args": {"n": 1}}, '
        f'{{"tool": "echo", "args": {deep}}}, {{"tool": "echo", "args": {{"n": 2}}}}]}}'
    )
    as_ndjson = "\n".join(
        [
            '{"tool": "echo", "args": {"n": 3}}',
            f'{{"tool": "echo", "args": {nested_args_json(10_000)}}}',
            f'{{"tool": "echo", "args": {deep}}}',
        ]
    )
    receipts = []
    with httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for content, kind in ((as_json, "application/json"), (as_ndjson, "application/x-ndjson")):
            response = http.post(
                "/v1/batches", content=content.encode(), headers={"Content-Type": kind}
            )
            assert response.status_code == 200, response.text[:300]
            receipts.append(response.json())

        def settled(batch_id: str) -> dict[str, Any] | None:
            body: dict[str, Any] = http.get(f"/v1/batches/{batch_id}").json()
            return body if body.get("done") else None

        states = [
            eventually(functools.partial(settled, r["batch_id"]), "the batch") for r in receipts
        ]
    json_receipt, ndjson_receipt = receipts
    assert json_receipt["total"] == 3 and json_receipt["accepted"] == 2
    assert json_receipt["rejected"] == [{"index": 1, "error": ARGS_TOO_DEEP}]
    assert ndjson_receipt["total"] == 3 and ndjson_receipt["accepted"] == 1
    assert ndjson_receipt["rejected"] == [
        {"index": 1, "error": "malformed call: nested too deeply"},
        {"index": 2, "error": ARGS_TOO_DEEP},
    ]
    assert [state["rejected"] for state in states] == [1, 2], states
    assert [state["counts"]["succeeded"] for state in states] == [2, 1], states
    assert call_rows_by(stack, name) == 3
    invalid = [event for event, _, _ in audit_by(stack, name) if event == "invalid"]
    print(
        f"[{backend}] nesting in batches: JSON batch of 3 with one {LIMIT + 1}-deep -> "
        f"accepted {json_receipt['accepted']}, rejected {len(json_receipt['rejected'])}; "
        f"NDJSON batch of 3 with a 10,000-deep and a {LIMIT + 1}-deep line -> accepted "
        f"{ndjson_receipt['accepted']}, rejected {len(ndjson_receipt['rejected'])}; "
        f"batch counts rejected {[s['rejected'] for s in states]}, audit {len(invalid)}x invalid"
    )


def test_an_mcp_call_with_too_deep_arguments_gets_an_error_result(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "agent")
    caller = Stack(env=stack.env, state_dir=stack.state_dir, base_url=stack.base_url)
    caller.keys = {"agent": token}
    outcomes: dict[str, Any] = {}

    async def scenario() -> None:
        async with mcp_session(caller) as client:
            outcomes["65"] = await client.call_tool("echo", nested_args(LIMIT + 1))

    run(scenario)

    # Deeper than the MCP SDK's own JSON parsing goes: the endpoint answers, it does not fall.
    with httpx.Client(
        base_url=stack.base_url,
        timeout=60,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        },
    ) as http:
        message = (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            f'{{"name": "echo", "arguments": {nested_args_json(10_000)}}}}}'
        )
        raw = http.post("/mcp", content=message.encode())
        shallow = message.replace(nested_args_json(10_000), '{"n": 3}')
        control = http.post("/mcp", content=shallow.encode())
    # JSON-RPC's own parse error, as JSON; the same message made shallow is answered.
    assert raw.status_code == 400 and raw.headers["content-type"] == "application/json"
    assert raw.json()["error"]["code"] == -32700, raw.text[:300]
    assert "Traceback" not in raw.text
    assert control.status_code == 200, control.text[:300]
    (event,) = [line for line in control.text.splitlines() if line.startswith("data: ")]
    assert json.loads(event.removeprefix("data: "))["result"]["isError"] is False

    async def still_there() -> None:
        async with mcp_session(caller) as client:
            outcomes["after"] = await client.call_tool("echo", {"n": 2})

    run(still_there)

    deep = outcomes["65"]
    assert deep.is_error is True
    assert text_of(deep) == ARGS_TOO_DEEP
    assert deep.structured_content is not None
    assert deep.structured_content["status"] == "rejected"
    assert outcomes["after"].is_error is False
    assert outcomes["after"].structured_content["value"] == {"n": 2}
    events = [event for event, _, _ in audit_by(stack, name)]
    assert events.count("invalid") == 1, events
    print(
        f"[{backend}] nesting over MCP: tools/call {LIMIT + 1}-deep -> isError, "
        f"{text_of(deep)!r}; raw JSON-RPC 10,000-deep -> HTTP {raw.status_code} "
        f"{raw.json()['error']['message']!r}, the same made shallow -> {control.status_code}; "
        f"next call -> {outcomes['after'].structured_content['status']}; audit {events}"
    )
