"""The HTTP API end to end (SPEC §4, §6, §8, §9): a real uvicorn API, a real Celery worker,
real Redis, on SQLite and on PostgreSQL. Every answer is checked field by field."""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any

import httpx
import pytest
import yaml

from router.runtime import Runtime

from ..support.audit import audit_rows
from ..support.calls import submit
from ..support.stack import TEST_CONFIG, Stack

WAIT_S = 30
CALL_ID = re.compile(r"^call_[0-9a-f]{32}$")
REQUEST_ID = re.compile(r"^req-[0-9a-f]{32}$")
SUCCEEDED_FIELDS = {"ok", "call_id", "tool", "status", "value"}
FAILED_FIELDS = {"ok", "call_id", "tool", "status", "error", "error_type"}
PENDING_FIELDS = {"ok", "call_id", "tool", "status", "pending", "request_id"}
QUEUED_FIELDS = {"ok", "call_id", "tool", "status"}
REJECTED_FIELDS = {"ok", "status", "tool", "error"}
AUDIT_ROW_FIELDS = {
    "seq",
    "at",
    "tool",
    "event",
    "call_id",
    "request_id",
    "actor",
    "detail",
    "prev_hash",
    "hash",
}
A_CALL_ID = "call_" + "0" * 32


# -- helpers -------------------------------------------------------------------------------


def run(http: httpx.Client, tool: str, args: Any = None, **extra: Any) -> dict[str, Any]:
    """Submit and wait for the outcome."""
    return submit(http, tool, args, wait_s=WAIT_S, **extra)


def assert_error_body(response: httpx.Response, status: int) -> dict[str, Any]:
    """An error answer: the status, and exactly ``{"ok": false, "error": "<message>"}``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"ok", "error"}, body
    assert body["ok"] is False
    assert isinstance(body["error"], str)
    assert body["error"].strip()
    assert "Traceback" not in body["error"]
    return body  # type: ignore[no-any-return]


def last_seq(stack: Stack) -> int:
    rows = audit_rows(stack, after_seq=_seen.get(stack.base_url, 0))
    if rows:
        _seen[stack.base_url] = rows[-1]["seq"]
    return _seen.get(stack.base_url, 0)


_seen: dict[str, int] = {}


def temporary_key(stack: Stack, roles: list[str]) -> tuple[str, str]:
    """A fresh key made the way ``toolrouter keys create`` makes one: (name, token)."""
    name = f"temp-{uuid.uuid4().hex[:12]}"
    runtime = Runtime(stack.settings)
    try:
        return name, runtime.keys.create(name, roles)
    finally:
        runtime.close()


def revoke_key(stack: Stack, name: str) -> None:
    runtime = Runtime(stack.settings)
    try:
        runtime.keys.revoke(name)
    finally:
        runtime.close()


def client_with_token(stack: Stack, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


# -- value shapes (SPEC §4) ----------------------------------------------------------------


def test_handler_value_comes_back_as_succeeded(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "echo", {"x": 1, "nested": {"y": [1, 2]}})
    assert set(body) == SUCCEEDED_FIELDS
    assert body["ok"] is True
    assert body["status"] == "succeeded"
    assert body["tool"] == "echo"
    assert CALL_ID.match(body["call_id"])
    assert body["value"] == {"x": 1, "nested": {"y": [1, 2]}}


@pytest.mark.parametrize(
    "falsy", [0, False, None, "", [], {}], ids=["zero", "false", "none", "empty-str", "[]", "{}"]
)
def test_handler_returning_falsy_value_succeeded(stack: Stack, falsy: Any) -> None:
    with stack.client() as http:
        body = run(http, "value", {"value": falsy})
    assert set(body) == SUCCEEDED_FIELDS
    assert body["ok"] is True
    assert body["status"] == "succeeded"
    assert body["tool"] == "value"
    assert body["value"] == falsy
    assert type(body["value"]) is type(falsy)


def test_handler_raising_value_error_fails_with_its_own_message(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "value_error", {"message": "insufficient funds"})
    assert set(body) == FAILED_FIELDS
    assert body["ok"] is False
    assert body["status"] == "failed"
    assert body["tool"] == "value_error"
    assert CALL_ID.match(body["call_id"])
    assert body["error"] == "insufficient funds"
    assert body["error_type"] == "ValueError"


@pytest.mark.parametrize(
    ("message", "stored"),
    [
        ("\x00boom", "\\x00boom"),
        ("\ud800x", "\\ud800x"),
        ("caf\u00e9 \U0001f600", "caf\u00e9 \U0001f600"),
    ],
)
def test_handler_message_no_database_stores_fails_the_call_escaped(
    stack: Stack, message: str, stored: str
) -> None:
    # Stored as raised, a NUL (PostgreSQL) or a lone surrogate (both) fails the outcome's
    # write, and the call would stay running until the reaper called it interrupted.
    with stack.client() as http:
        # Escaped as JSON allows: httpx would refuse to encode a lone surrogate itself.
        sent = {"tool": "value_error", "args": {"message": message}, "wait_s": WAIT_S}
        response = http.post(
            "/v1/calls",
            content=json.dumps(sent).encode("ascii"),
            headers={"Content-Type": "application/json"},
        )
        body = response.json()
        assert body["status"] == "failed", body
        assert body["error"] == stored
        again = http.get(f"/v1/calls/{body['call_id']}").json()
    assert again["status"] == "failed"
    assert again["error"] == stored


def test_an_exception_class_name_longer_than_its_column_is_cut(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "long_named_error")
    assert (body["status"], body["error"]) == ("failed", "a long-named failure"), body
    assert body["error_type"] == "E" * 128


def test_handler_raising_key_error_fails_with_the_key(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "key_error")
    assert set(body) == FAILED_FIELDS
    assert body["status"] == "failed"
    assert body["error"] == "missing_key"
    assert body["error_type"] == "KeyError"


def test_exception_without_message_fails_with_its_class_name(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "empty_error")
    assert set(body) == FAILED_FIELDS
    assert body["status"] == "failed"
    assert body["error"] == "RuntimeError"
    assert body["error_type"] == "RuntimeError"


@pytest.mark.parametrize(
    ("tool", "error", "error_type"),
    [("system_exit", "3", "SystemExit"), ("keyboard_interrupt", None, "KeyboardInterrupt")],
)
def test_system_exit_and_keyboard_interrupt_fail_only_their_call(
    stack: Stack, tool: str, error: str | None, error_type: str
) -> None:
    with stack.client() as http:
        body = run(http, tool)
        assert set(body) == FAILED_FIELDS
        assert body["ok"] is False
        assert body["status"] == "failed"
        assert body["error"] == (error or error_type)
        assert body["error_type"] == error_type
        # The worker keeps serving: more calls than it has pool processes all succeed.
        for n in range(4):
            after = run(http, "echo", {"n": n})
            assert after["status"] == "succeeded", after
            assert after["value"] == {"n": n}
    assert stack.processes["worker"].poll() is None
    # The pool process that ran the raising handler is still there.
    (error_row,) = audit_rows(stack, call_id=body["call_id"], event="error")
    pid = int(error_row["actor"].rsplit(":", 1)[1])
    os.kill(pid, 0)


@pytest.mark.parametrize("tool", ["not_json", "nan"])
def test_result_that_is_not_json_fails_the_call(stack: Stack, tool: str) -> None:
    with stack.client() as http:
        body = run(http, tool)
    assert set(body) == FAILED_FIELDS
    assert body["ok"] is False
    assert body["status"] == "failed"
    assert body["tool"] == tool
    assert body["error"].strip()
    assert "Traceback" not in body["error"]
    assert body["error_type"].strip()


def test_call_submitted_without_wait_is_queued_then_succeeds(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "echo", {"q": True})
        assert set(body) == QUEUED_FIELDS
        assert body == {
            "ok": False,
            "call_id": body["call_id"],
            "tool": "echo",
            "status": "queued",
        }
        assert CALL_ID.match(body["call_id"])
        done = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": WAIT_S})
    assert done.status_code == 200, done.text
    assert done.json() == {
        "ok": True,
        "call_id": body["call_id"],
        "tool": "echo",
        "status": "succeeded",
        "value": {"q": True},
    }


def test_gated_call_is_pending_with_a_fresh_request_id(stack: Stack) -> None:
    with stack.client() as http:
        first = submit(http, "high_echo", {"to": "x"})
        second = submit(http, "high_echo", {"to": "x"})
        for body in (first, second):
            assert set(body) == PENDING_FIELDS
            assert body["ok"] is False
            assert body["status"] == "pending"
            assert body["pending"] is True
            assert body["tool"] == "high_echo"
            assert CALL_ID.match(body["call_id"])
            assert REQUEST_ID.match(body["request_id"])
        assert first["request_id"] != second["request_id"]
        assert first["call_id"] != second["call_id"]
        for body in (first, second):
            assert http.delete(f"/v1/calls/{body['call_id']}").status_code == 200


def test_gated_call_with_wait_still_answers_pending(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "high_echo", {"to": "y"}, wait_s=0.5)
        assert set(body) == PENDING_FIELDS
        assert body["status"] == "pending"
        assert http.delete(f"/v1/calls/{body['call_id']}").status_code == 200


def test_unknown_tool_is_rejected_without_a_call_id(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "search", {"q": "x"})
    assert body == {
        "ok": False,
        "status": "rejected",
        "tool": "search",
        "error": "unknown tool: search",
        # The message stays exact; the registered names close to it come beside it.
        "did_you_mean": ["search_backup", "search_primary", "echo"],
    }


def test_a_typo_in_a_tool_name_gets_suggestions_and_nonsense_gets_none(stack: Stack) -> None:
    with stack.client() as http:
        typo = submit(http, "ehco", {})
        nonsense = submit(http, "zzzzqqqq", {})
    assert (typo["error"], typo["did_you_mean"][0]) == ("unknown tool: ehco", "echo")
    assert "did_you_mean" not in nonsense


def test_invalid_arguments_are_rejected_without_a_call_id(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "strict", {"to": "bob", "amount": -5})
    assert set(body) == REJECTED_FIELDS
    assert body["ok"] is False
    assert body["status"] == "rejected"
    assert body["tool"] == "strict"
    assert body["error"].startswith("invalid arguments: ")
    assert len(body["error"]) > len("invalid arguments: ")


def test_valid_arguments_to_a_schema_tool_succeed(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "strict", {"to": "bob", "amount": 5})
    assert body["status"] == "succeeded"
    assert body["value"] == {"to": "bob", "amount": 5}


@pytest.mark.parametrize("name", ["toString", "constructor", "__proto__", "celery.backend_cleanup"])
def test_attribute_and_task_names_are_unknown_tools(stack: Stack, name: str) -> None:
    with stack.client() as http:
        body = submit(http, name, {})
        assert body == {
            "ok": False,
            "status": "rejected",
            "tool": name,
            "error": f"unknown tool: {name}",
        }
        assert_error_body(http.get(f"/v1/tools/{name}"), 404)


def test_registered_dunder_name_is_a_working_tool(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "__class__", {"a": 1})
    assert body == {
        "ok": True,
        "call_id": body["call_id"],
        "tool": "__class__",
        "status": "succeeded",
        "value": {"a": 1},
    }


# -- handler context (SPEC §3, §6) ---------------------------------------------------------


def test_handler_context_carries_the_clients_idempotency_key(stack: Stack) -> None:
    key = unique("ctx")
    with stack.client() as http:
        body = run(http, "context", {}, idempotency_key=key)
    assert body["status"] == "succeeded", body
    assert body["value"] == {
        "call_id": body["call_id"],
        "idempotency_key": key,
        "attempt": 1,
        "requested_by": "agent",
        "tool": "context",
    }


def test_handler_context_idempotency_key_defaults_to_the_call_id(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "context", {})
    assert body["status"] == "succeeded", body
    assert body["value"]["idempotency_key"] == body["call_id"]
    assert body["value"]["call_id"] == body["call_id"]
    assert body["value"]["attempt"] == 1
    assert body["value"]["requested_by"] == "agent"


def test_handler_context_requested_by_is_the_key_name(stack: Stack) -> None:
    with stack.client("agent2") as http:
        body = run(http, "context", {})
    assert body["value"]["requested_by"] == "agent2"


# -- submission idempotency (SPEC §6) ------------------------------------------------------


def test_same_idempotency_key_in_body_returns_the_same_call(stack: Stack) -> None:
    key = unique("idem")
    with stack.client() as http:
        first = run(http, "echo", {"n": 1}, idempotency_key=key)
        again = run(http, "echo", {"n": 1}, idempotency_key=key)
    assert first["status"] == "succeeded"
    assert again == first
    events = [row["event"] for row in audit_rows(stack, call_id=first["call_id"])]
    assert events == ["queued", "ok"]


def test_same_idempotency_key_in_header_returns_the_same_call(stack: Stack) -> None:
    key = unique("idem-header")
    with stack.client() as http:
        first = http.post(
            "/v1/calls",
            json={"tool": "echo", "args": {"n": 2}, "wait_s": WAIT_S},
            headers={"Idempotency-Key": key},
        )
        again = http.post(
            "/v1/calls",
            json={"tool": "echo", "args": {"n": 2}, "wait_s": WAIT_S},
            headers={"Idempotency-Key": key},
        )
        # The header and the body field are one key.
        body_field = run(http, "echo", {"n": 2}, idempotency_key=key)
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == "succeeded"
    assert again.json() == first.json()
    assert body_field == first.json()


def test_a_non_ascii_key_in_the_header_is_the_same_key_as_in_the_body(stack: Stack) -> None:
    key = unique("commande-é")
    call = {"tool": "context", "args": {}, "wait_s": WAIT_S}
    with stack.client() as http:
        by_header = http.post("/v1/calls", json=call, headers={"Idempotency-Key": key.encode()})
        by_body = http.post("/v1/calls", json={**call, "idempotency_key": key})
        latin1 = http.post("/v1/calls", json=call, headers={"Idempotency-Key": b"cl\xe9"})
    assert by_header.status_code == 200, by_header.text
    assert by_header.json()["value"]["idempotency_key"] == key
    assert by_body.json() == by_header.json()
    assert_error_body(latin1, 422)
    assert latin1.json()["error"] == "the Idempotency-Key header must be UTF-8 text"


@pytest.mark.parametrize("path", ["/v1/calls", "/v1/batches"])
def test_a_header_key_and_another_body_key_are_422(stack: Stack, path: str) -> None:
    # Two keys for one request: which one the caller meant cannot be guessed.
    call = {"tool": "echo", "args": {}}
    body = {"calls": [call]} if path == "/v1/batches" else call
    with stack.client() as http:
        response = http.post(
            path,
            json={**body, "idempotency_key": unique("body")},
            headers={"Idempotency-Key": unique("header")},
        )
    assert_error_body(response, 422)
    assert response.json()["error"] == "idempotency_key and the Idempotency-Key header differ"


@pytest.mark.parametrize("path", ["/v1/calls", "/v1/batches"])
def test_the_key_header_given_twice_is_422(stack: Stack, path: str) -> None:
    # A proxy reading the last one would take the request for another call than the first
    # names; which one the caller meant cannot be guessed either.
    call = {"tool": "echo", "args": {}}
    body = {"calls": [call]} if path == "/v1/batches" else call
    keys = [("Idempotency-Key", unique("first")), ("Idempotency-Key", unique("second"))]
    with stack.client() as http:
        response = http.post(path, json=body, headers=keys)
    assert_error_body(response, 422)
    assert response.json()["error"] == "the Idempotency-Key header is given more than once"


def test_idempotent_replay_of_a_gated_call_returns_the_same_request(stack: Stack) -> None:
    key = unique("idem-gated")
    with stack.client() as http:
        first = submit(http, "high_echo", {"n": 3}, idempotency_key=key)
        again = submit(http, "high_echo", {"n": 3}, idempotency_key=key)
        assert again == first
        assert first["status"] == "pending"
        assert http.delete(f"/v1/calls/{first['call_id']}").status_code == 200


def test_idempotency_key_reused_with_different_arguments_is_a_conflict(stack: Stack) -> None:
    key = unique("idem-conflict")
    with stack.client() as http:
        first = run(http, "echo", {"n": 1}, idempotency_key=key)
        before = last_seq(stack)
        other_args = http.post(
            "/v1/calls", json={"tool": "echo", "args": {"n": 2}, "idempotency_key": key}
        )
        other_tool = http.post(
            "/v1/calls", json={"tool": "value", "args": {"n": 1}, "idempotency_key": key}
        )
        via_header = http.post(
            "/v1/calls", json={"tool": "echo", "args": {"n": 3}}, headers={"Idempotency-Key": key}
        )
    assert first["status"] == "succeeded"
    for response in (other_args, other_tool, via_header):
        assert response.status_code == 409, response.text
        assert response.json() == {
            "ok": False,
            "error": "idempotency key reused with different arguments",
        }
    # A conflict is not a call: nothing was accepted.
    assert [r for r in audit_rows(stack, after_seq=before) if r["actor"] == "agent"] == []


def test_idempotency_keys_are_scoped_per_api_key(stack: Stack) -> None:
    key = unique("idem-scope")
    with stack.client("agent") as http:
        mine = run(http, "echo", {"n": 1}, idempotency_key=key)
    with stack.client("agent2") as http:
        theirs = run(http, "echo", {"n": 1}, idempotency_key=key)
        # Different arguments are no conflict either: it is a different key's namespace.
        different = run(http, "echo", {"n": 9}, idempotency_key=unique("idem-scope"))
    assert mine["status"] == theirs["status"] == "succeeded"
    assert theirs["call_id"] != mine["call_id"]
    assert different["status"] == "succeeded"
    (queued,) = audit_rows(stack, call_id=theirs["call_id"], event="queued")
    assert queued["actor"] == "agent2"


# -- reading and cancelling calls (SPEC §8) ------------------------------------------------


def test_get_call_returns_the_same_result_as_the_submission(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "echo", {"g": 1})
        read = http.get(f"/v1/calls/{body['call_id']}")
        waited = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": 5})
    assert read.status_code == 200
    assert read.json() == body
    assert waited.status_code == 200
    assert waited.json() == body


def test_get_call_with_wait_returns_the_outcome(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "value", {"value": 0})
        assert body["status"] == "queued"
        waited = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": WAIT_S})
    assert waited.status_code == 200
    assert waited.json() == {
        "ok": True,
        "call_id": body["call_id"],
        "tool": "value",
        "status": "succeeded",
        "value": 0,
    }


def test_get_call_with_wait_on_a_pending_call_answers_pending(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "high_echo", {"w": 1})
        waited = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": 0.5})
        assert waited.status_code == 200
        assert waited.json() == body
        assert http.delete(f"/v1/calls/{body['call_id']}").status_code == 200


@pytest.mark.parametrize("reader", ["agent2", "approver"])
def test_other_keys_get_404_for_someone_elses_call(stack: Stack, reader: str) -> None:
    with stack.client("agent") as http:
        body = run(http, "echo", {"secret": 1})
    with stack.client(reader) as http:
        plain = http.get(f"/v1/calls/{body['call_id']}")
        waited = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": 1})
    assert_error_body(plain, 404)
    assert_error_body(waited, 404)
    assert "secret" not in plain.text


def test_unknown_call_id_is_404(stack: Stack) -> None:
    with stack.client() as http:
        assert_error_body(http.get(f"/v1/calls/{A_CALL_ID}"), 404)
        assert_error_body(http.get(f"/v1/calls/{A_CALL_ID}", params={"wait_s": 1}), 404)
        assert_error_body(http.delete(f"/v1/calls/{A_CALL_ID}"), 404)


def test_operator_can_read_any_call(stack: Stack) -> None:
    with stack.client("agent") as http:
        body = run(http, "echo", {"o": 1})
    with stack.client("operator") as http:
        read = http.get(f"/v1/calls/{body['call_id']}")
    assert read.status_code == 200
    assert read.json() == body


def test_cancelling_a_pending_call_cancels_it_once(stack: Stack) -> None:
    with stack.client() as http:
        body = submit(http, "high_echo", {"c": 1})
        cancelled = http.delete(f"/v1/calls/{body['call_id']}")
        assert cancelled.status_code == 200, cancelled.text
        answer = cancelled.json()
        assert answer["ok"] is False
        assert answer["status"] == "cancelled"
        assert answer["call_id"] == body["call_id"]
        assert answer["tool"] == "high_echo"
        read = http.get(f"/v1/calls/{body['call_id']}")
        assert read.status_code == 200
        assert read.json()["status"] == "cancelled"
        again = http.delete(f"/v1/calls/{body['call_id']}")
    assert_error_body(again, 409)
    rows = audit_rows(stack, call_id=body["call_id"])
    assert [row["event"] for row in rows] == ["pending", "cancelled"]
    assert rows[1]["actor"] == "agent"
    assert rows[1]["request_id"] == body["request_id"]


def test_cancelling_a_finished_call_is_a_conflict(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "echo", {"done": 1})
        response = http.delete(f"/v1/calls/{body['call_id']}")
        assert_error_body(response, 409)
        assert http.get(f"/v1/calls/{body['call_id']}").json() == body


def test_cancelling_someone_elses_call_is_404_and_changes_nothing(stack: Stack) -> None:
    with stack.client("agent") as http:
        body = submit(http, "high_echo", {"c": 2})
    with stack.client("agent2") as other:
        assert_error_body(other.delete(f"/v1/calls/{body['call_id']}"), 404)
    with stack.client("agent") as http:
        assert http.get(f"/v1/calls/{body['call_id']}").json() == body
        assert http.delete(f"/v1/calls/{body['call_id']}").status_code == 200
    events = [row["event"] for row in audit_rows(stack, call_id=body["call_id"])]
    assert events == ["pending", "cancelled"]


# -- tools (SPEC §8) -----------------------------------------------------------------------


def test_tools_lists_every_registered_tool(stack: Stack) -> None:
    configured = yaml.safe_load(TEST_CONFIG.read_text())["tools"]
    with stack.client() as http:
        response = http.get("/v1/tools")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert set(tools) == {tool["name"] for tool in configured}
    assert tools["high_echo"]["requires_approval"] is True
    assert tools["high_echo"]["risk"] == "high"
    assert tools["echo"]["requires_approval"] is False
    strict = next(tool for tool in configured if tool["name"] == "strict")
    assert tools["strict"]["input_schema"] == strict["input_schema"]


@pytest.mark.parametrize("key", ["agent", "operator", "approver", "admin"])
def test_any_key_may_read_one_tool(stack: Stack, key: str) -> None:
    with stack.client(key) as http:
        response = http.get("/v1/tools/echo")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["tool"]["name"] == "echo"
    assert body["tool"]["risk"] == "low"
    assert body["tool"]["description"] == "Echo the arguments"


def test_unknown_tool_definition_is_404(stack: Stack) -> None:
    with stack.client() as http:
        body = assert_error_body(http.get("/v1/tools/search"), 404)
    assert "search" in body["error"]


# -- audit (SPEC §7, §8) -------------------------------------------------------------------


@pytest.mark.parametrize("key", ["agent", "approver"])
def test_audit_is_forbidden_to_non_operators(stack: Stack, key: str) -> None:
    with stack.client(key) as http:
        assert_error_body(http.get("/v1/audit"), 403)


def test_audit_is_open_to_admins(stack: Stack) -> None:
    with stack.client("admin") as http:
        response = http.get("/v1/audit", params={"limit": 1})
    assert response.status_code == 200
    assert response.json()["ok"] is True


def test_audit_rows_of_a_call_are_queued_then_ok(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "echo", {"audited": 1})
    rows = audit_rows(stack, call_id=body["call_id"])
    assert [row["event"] for row in rows] == ["queued", "ok"]
    for row in rows:
        assert set(row) == AUDIT_ROW_FIELDS
        assert row["tool"] == "echo"
        assert row["call_id"] == body["call_id"]
    assert rows[0]["actor"] == "agent"
    assert rows[0]["seq"] < rows[1]["seq"]
    assert rows[0]["at"] <= rows[1]["at"]


def test_audit_rows_of_a_failed_call_are_queued_then_error(stack: Stack) -> None:
    with stack.client() as http:
        body = run(http, "value_error", {"message": "nope"})
    rows = audit_rows(stack, call_id=body["call_id"])
    assert [row["event"] for row in rows] == ["queued", "error"]


def test_rejected_calls_are_audited_as_unknown_and_invalid(stack: Stack) -> None:
    name = unique("search")
    before = last_seq(stack)
    with stack.client() as http:
        assert submit(http, name)["status"] == "rejected"
        assert submit(http, "strict", {"to": 5})["status"] == "rejected"
    (unknown,) = audit_rows(stack, after_seq=before, tool=name)
    assert unknown["event"] == "unknown"
    assert unknown["actor"] == "agent"
    assert unknown["call_id"] is None
    (invalid,) = audit_rows(stack, after_seq=before, tool="strict", event="invalid")
    assert invalid["actor"] == "agent"
    assert invalid["call_id"] is None
    assert invalid["seq"] > unknown["seq"]


def test_audit_pages_with_after_seq_and_limit(stack: Stack) -> None:
    name = unique("paged")
    before = last_seq(stack)
    with stack.client() as http:
        for _ in range(3):
            assert submit(http, name)["status"] == "rejected"
    with stack.client("operator") as http:
        params = {"tool": name, "event": "unknown", "limit": 2}
        first = http.get("/v1/audit", params={**params, "after_seq": before}).json()
        second = http.get(
            "/v1/audit", params={**params, "after_seq": first["next_after_seq"]}
        ).json()
        third = http.get(
            "/v1/audit", params={**params, "after_seq": second["next_after_seq"]}
        ).json()
        one = http.get("/v1/audit", params={"after_seq": before, "limit": 1}).json()
    assert len(first["rows"]) == 2
    assert first["next_after_seq"] == first["rows"][-1]["seq"]
    assert len(second["rows"]) == 1
    assert second["next_after_seq"] == second["rows"][0]["seq"]
    assert third["rows"] == []
    assert third["next_after_seq"] == second["next_after_seq"]
    seqs = [row["seq"] for row in first["rows"] + second["rows"]]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 3
    assert all(seq > before for seq in seqs)
    assert len(one["rows"]) == 1
    assert one["rows"][0]["seq"] == seqs[0]


# -- authentication (SPEC §8, §9) ----------------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_endpoints_answer_without_a_key(stack: Stack, path: str) -> None:
    with stack.client("") as http:
        response = http.get(path)
        # As uptime checkers probe: the same status, no body.
        head = http.head(path)
    assert response.status_code == 200
    assert response.json() == {"ok": True}
    assert (head.status_code, head.content) == (200, b"")


def test_the_api_address_leads_people_to_the_inbox_which_has_an_icon(stack: Stack) -> None:
    with stack.client("") as http:
        home = http.get("/", follow_redirects=True)
        icon = http.get("/favicon.ico", follow_redirects=True)
    assert home.status_code == 200
    assert str(home.url).endswith("/ui/")
    assert 'rel="icon"' in home.text
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")


def test_openapi_document_answers_without_a_key(stack: Stack) -> None:
    with stack.client("") as http:
        response = http.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/v1/calls" in paths
    assert "/v1/calls/{call_id}" in paths


KNOWN_ENDPOINTS = [
    ("POST", "/v1/calls"),
    ("GET", f"/v1/calls/{A_CALL_ID}"),
    ("DELETE", f"/v1/calls/{A_CALL_ID}"),
    ("GET", "/v1/tools"),
    ("GET", "/v1/tools/echo"),
    ("GET", "/v1/audit"),
]


def v1_endpoints(stack: Stack) -> list[tuple[str, str]]:
    """Every ``/v1`` operation the API documents, with its path parameters filled in."""
    with stack.client("") as http:
        paths = http.get("/openapi.json").json()["paths"]
    endpoints = set(KNOWN_ENDPOINTS)
    for path, operations in paths.items():
        if not path.startswith("/v1"):
            continue
        concrete = re.sub(r"\{[^}]*\}", lambda m: A_CALL_ID if "call" in m[0] else "echo", path)
        endpoints.update((method.upper(), concrete) for method in operations)
    return sorted(endpoints)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": "Basic YWdlbnQ6YWdlbnQ="},
    ],
    ids=["missing", "empty-bearer", "wrong-key", "basic-auth"],
)
def test_every_v1_endpoint_without_a_valid_key_is_401(
    stack: Stack, headers: dict[str, str]
) -> None:
    with stack.client("") as http:
        for method, path in v1_endpoints(stack):
            response = http.request(method, path, json={"tool": "echo"}, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert_error_body(response, 401)


def test_a_revoked_key_is_401(stack: Stack) -> None:
    name, token = temporary_key(stack, ["agent", "operator"])
    with client_with_token(stack, token) as http:
        assert http.get("/v1/tools").status_code == 200
        assert run(http, "echo", {"r": 1})["status"] == "succeeded"
        revoke_key(stack, name)
        before = last_seq(stack)
        for method, path in v1_endpoints(stack):
            response = http.request(method, path, json={"tool": "echo", "args": {}})
            assert_error_body(response, 401)
    assert [row for row in audit_rows(stack, after_seq=before) if row["actor"] == name] == []


def test_a_new_key_is_its_own_identity(stack: Stack) -> None:
    name, token = temporary_key(stack, ["agent"])
    with client_with_token(stack, token) as http:
        body = run(http, "context", {})
    assert body["value"]["requested_by"] == name
    with stack.client("agent") as http:
        assert_error_body(http.get(f"/v1/calls/{body['call_id']}"), 404)


@pytest.mark.parametrize("key", ["operator", "approver", "finance"])
def test_only_agent_keys_submit_calls(stack: Stack, key: str) -> None:
    with stack.client(key) as http:
        response = http.post("/v1/calls", json={"tool": "echo", "args": {}})
    assert response.status_code == 403
    assert response.json() == {"ok": False, "error": "agent role required to submit calls"}
