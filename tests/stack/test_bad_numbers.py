"""Numbers in query strings and tool arguments: only what JSON writes as a number is taken
(ASCII digits, no spaces, no ``_``), and a number out of range is a clear error."""

from __future__ import annotations

import json

import pytest

from ..support.stack import Stack

# Python's ``int`` and ``float`` read all of these; none is a number as JSON writes it.
NOT_NUMBERS = ["1_0", " 5 ", "+5", "\u0665", "0x10", ""]


@pytest.mark.parametrize("text", NOT_NUMBERS)
@pytest.mark.parametrize(
    ("path", "key", "message"),
    [
        ("/v1/approvals?limit=", "approver", "limit must be an integer"),
        ("/v1/audit?limit=", "operator", "limit must be an integer"),
        ("/v1/audit?after_seq=", "operator", "after_seq must be an integer"),
        ("/v1/notifications?limit=", "operator", "limit must be an integer"),
        (f"/v1/calls/call_{'0' * 32}?wait_s=", "agent", "wait_s must be a number of seconds"),
    ],
)
def test_a_query_number_python_reads_but_json_does_not_write_is_422(
    stack: Stack, path: str, key: str, message: str, text: str
) -> None:
    with stack.client(key) as http:
        response = http.get(path + text)
    assert response.status_code == 422, response.text
    assert response.json() == {"ok": False, "error": message}


@pytest.mark.parametrize("text", ["5", "2.5", "1e1", "0"])
def test_a_query_number_as_json_writes_it_is_taken(stack: Stack, text: str) -> None:
    with stack.client("operator") as http:
        assert http.get(f"/v1/audit?limit={int(float(text)) or 1}").status_code == 200
    with stack.client("agent") as http:
        response = http.get(f"/v1/calls/call_{'0' * 32}?wait_s={text}")
    assert response.status_code == 404, response.text  # the number passed; the call is unknown


OUT_OF_RANGE = "wait_s must be between 0 and "
NOT_A_NUMBER = "wait_s must be a number of seconds"


@pytest.mark.parametrize(
    ("wait_s", "refusal"),
    [
        *[(out, OUT_OF_RANGE) for out in ("10" + "0" * 400, "1e400", "-1", "301")],
        *[(odd, NOT_A_NUMBER) for odd in ('"5"', "true", "[1]")],
    ],
)
def test_call_status_over_mcp_refuses_a_wait_out_of_range(
    stack: Stack, wait_s: str, refusal: str
) -> None:
    """An integer too large for a float included: it is out of range, not an internal error.
    A value that is no number is told as the HTTP API tells it."""
    arguments = f'{{"call_id": "call_{"0" * 32}", "wait_s": {wait_s}}}'
    body = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": '
        f'{{"name": "toolrouter.call_status", "arguments": {arguments}}}}}'
    )
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    with stack.client("agent") as http:
        response = http.post("/mcp", content=body, headers=headers)
    assert response.status_code == 200, response.text
    text = response.text
    payload = (
        json.loads(text[text.index("{") :].splitlines()[0]) if "data:" in text else response.json()
    )
    result = payload["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(refusal), result


@pytest.mark.parametrize(
    ("path", "key", "name"),
    [
        ("/v1/audit?event=nope&event=queued", "operator", "event"),
        ("/v1/audit?limit=5&tool=a&limit=7", "operator", "limit"),
        (f"/v1/calls/call_{'0' * 32}?wait_s=-5&wait_s=1", "agent", "wait_s"),
        ("/v1/calls?wait_s=1&wait_s=", "agent", "wait_s"),
        ("/v1/approvals?status=pending&status%3D=x&status=decided", "approver", "status"),
    ],
)
def test_a_query_parameter_given_twice_is_422_whichever_value_would_pass(
    stack: Stack, path: str, key: str, name: str
) -> None:
    with stack.client(key) as http:
        response = http.request("POST" if path.startswith("/v1/calls?") else "GET", path)
    assert response.status_code == 422, response.text
    assert response.json() == {
        "ok": False,
        "error": f"query parameter given more than once: {name}",
    }
