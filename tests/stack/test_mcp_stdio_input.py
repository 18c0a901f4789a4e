"""``toolrouter mcp`` reads what a broken or hostile client writes on stdin as ``/mcp``
reads a body: invalid UTF-8 is a parse error (never a call on other arguments), and a
request whose id is no string or integer gets an error (never silence)."""

from __future__ import annotations

import json
from typing import Any

from router.mcp.http import BAD_REQUEST_ID

from ..support.audit import audit_rows, audit_total
from ..support.mcp_pipe import piped_session
from ..support.stack import Stack


def call_line(request_id: Any, marker: str, value: str = "plain") -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"marker": marker, "value": value}},
    }
    return json.dumps(message, ensure_ascii=False).encode()


def answers_and_errors(stdout: str) -> tuple[dict[Any, Any], list[dict[str, Any]]]:
    messages = [json.loads(line) for line in stdout.splitlines()]
    answers = {message["id"]: message for message in messages if message.get("id") is not None}
    errors = [message["error"] for message in messages if "id" in message and message["id"] is None]
    return answers, errors


def echo_calls_after(stack: Stack, seq: int) -> list[dict[str, Any]]:
    return [row for row in audit_rows(stack, after_seq=seq, tool="echo") if row["event"] == "ok"]


def test_invalid_utf8_on_stdin_is_a_parse_error_and_runs_nothing(stack: Stack) -> None:
    before = audit_total(stack)
    # "caf\xe9": Latin-1, not UTF-8; the SDK's reader would run the call on "caf\ufffd".
    broken = call_line(2, "broken").replace(b'"plain"', b'"caf\xe9"')
    done = piped_session(
        stack,
        [broken, call_line(3, "whole", "café"), {"jsonrpc": "2.0", "id": 4, "method": "ping"}],
        version="2025-11-25",
    )
    assert done.returncode == 0, done.stderr
    answers, errors = answers_and_errors(done.stdout)
    assert [error["code"] for error in errors] == [-32700], done.stdout
    assert errors[0]["message"].startswith("Parse error: invalid unicode code point")
    assert 2 not in answers
    assert answers[3]["result"]["structuredContent"]["value"]["value"] == "café"
    assert answers[4] == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert len(echo_calls_after(stack, before)) == 1


def test_a_request_whose_id_is_no_string_or_integer_gets_an_error_over_stdio(
    stack: Stack,
) -> None:
    before = audit_total(stack)
    bad_ids: list[Any] = [None, 1.5, True, {"a": 1}, [7]]
    done = piped_session(
        stack,
        [
            *(call_line(request_id, "bad-id") for request_id in bad_ids),
            {"jsonrpc": "2.0", "id": 1.0, "method": "ping"},
            {"jsonrpc": "2.0", "id": 9, "method": "ping"},
        ],
        version="2025-11-25",
    )
    assert done.returncode == 0, done.stderr
    answers, errors = answers_and_errors(done.stdout)
    assert errors == [{"code": -32600, "message": BAD_REQUEST_ID}] * 6, done.stdout
    assert answers[9] == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert echo_calls_after(stack, before) == []
