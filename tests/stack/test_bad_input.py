"""SPEC §14, one row at a time, against the real API: every bad input gets a clear error
value, never a 500 or a stack trace, and the audit log gains nothing but the ``unknown`` /
``invalid`` row that SPEC §4 gives a rejected call."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from router.db.schema import calls
from router.names import MAX_ECHOED_NAME
from router.runtime import Runtime

from ..support.stack import Stack

A_CALL_ID = "call_" + "0" * 32
A_REQUEST_ID = "req-" + "0" * 32
LONG = "x" * 10_000
SURROGATE_ARGS = b'{"tool": "echo", "args": {"s": "\\ud800"}}'
SURROGATE_ARGS_WAITING = b'{"tool": "echo", "args": {"s": "\\ud800"}, "wait_s": 30}'
JSON = {"Content-Type": "application/json"}
# Rows written by workers for calls accepted before the watch began are not this test's.
BACKGROUND_ACTORS = ("worker@",)


# -- helpers -------------------------------------------------------------------------------


def assert_clear_error(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    """Never a 500; a JSON body with ``ok: false`` and a message that is not a traceback."""
    assert response.status_code != 500, response.text
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.headers.get("content-type", "").startswith("application/json"), response.text
    body = response.json()
    assert isinstance(body, dict)
    assert body["ok"] is False
    assert isinstance(body["error"], str)
    assert body["error"].strip()
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    # Clear means short: a huge input is not echoed back in full.
    assert len(body["error"]) < 1000
    return body  # type: ignore[no-any-return]


class AuditWatch:
    """The audit rows appended since the watch began (read as an operator over HTTP)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.start = self.rows(_cursor.get(stack.base_url, 0))[-1:]
        self.after = self.start[0]["seq"] if self.start else _cursor.get(stack.base_url, 0)
        _cursor[stack.base_url] = self.after

    def rows(self, after: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        with self.stack.client("operator") as http:
            while True:
                response = http.get("/v1/audit", params={"after_seq": after, "limit": 1000})
                assert response.status_code == 200, response.text
                page = response.json()["rows"]
                rows.extend(page)
                if len(page) < 1000:
                    return rows
                after = page[-1]["seq"]

    def events(self) -> list[str]:
        rows = self.rows(self.after)
        return [
            row["event"]
            for row in rows
            if not str(row["actor"] or "").startswith(BACKGROUND_ACTORS)
        ]


_cursor: dict[str, int] = {}


@contextmanager
def audit_watch(stack: Stack) -> Iterator[AuditWatch]:
    yield AuditWatch(stack)


def post(stack: Stack, content: bytes, key: str = "agent") -> httpx.Response:
    with stack.client(key) as http:
        return http.post("/v1/calls", content=content, headers=JSON)


def post_json(stack: Stack, body: Any, key: str = "agent") -> httpx.Response:
    return post(stack, json.dumps(body).encode(), key)


def assert_refused(stack: Stack, watch: AuditWatch, response: httpx.Response, status: int) -> None:
    """Refused before it became a call: exactly ``{ok, error}`` and no audit row at all."""
    body = assert_clear_error(response, status)
    assert set(body) == {"ok", "error"}, body
    assert watch.events() == []


def assert_rejected(
    stack: Stack, watch: AuditWatch, response: httpx.Response, event: str
) -> dict[str, Any]:
    """A rejected call (SPEC §4): HTTP 200, no call id, and one ``unknown``/``invalid`` row."""
    body = assert_clear_error(response, 200)
    assert body["status"] == "rejected"
    assert "call_id" not in body
    assert watch.events() == [event]
    return body


def assert_refused_or_rejected(
    stack: Stack, watch: AuditWatch, response: httpx.Response, *, status: int, event: str
) -> None:
    """Either answer is a clear error value; which one is the product's choice."""
    if response.status_code == 200:
        assert_rejected(stack, watch, response, event)
    else:
        assert_refused(stack, watch, response, status)


@pytest.fixture
def pending_call(stack: Stack) -> Iterator[str]:
    """A call of the agent's that stays put (gated, nobody approves it)."""
    with stack.client() as http:
        body = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()
    assert body["status"] == "pending", body
    yield body["call_id"]
    with stack.client() as http:
        http.delete(f"/v1/calls/{body['call_id']}")


# -- bodies that are not JSON objects ------------------------------------------------------


def test_non_json_body_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b"tool=echo&args=x")
        assert_refused(stack, watch, response, 422)


def test_truncated_json_body_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b'{"tool": "echo", "args": {')
        assert_refused(stack, watch, response, 422)


def test_invalid_utf8_body_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b'{"tool": "echo", "args": {"x": "\xff\xfe\xc3"}}')
        assert_refused(stack, watch, response, 422)


def test_invalid_utf8_in_tool_name_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b'{"tool": "ec\xc3\x28ho", "args": {}}')
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize("content", [b"", b"   ", b"\n"], ids=["empty", "spaces", "newline"])
def test_empty_body_is_422(stack: Stack, content: bytes) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, content)
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize(
    "body",
    [[{"tool": "echo", "args": {}}], "echo", 42, None, True],
    ids=["array", "string", "number", "null", "true"],
)
def test_body_that_is_not_an_object_is_422(stack: Stack, body: Any) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, body)
        assert_refused(stack, watch, response, 422)


# -- the tool name -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool", [42, None, ["echo"], {"name": "echo"}, True], ids=["int", "null", "list", "obj", "bool"]
)
def test_tool_that_is_not_a_string_is_a_clear_error(stack: Stack, tool: Any) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": tool, "args": {}})
        assert_refused_or_rejected(stack, watch, response, status=422, event="unknown")


def test_missing_tool_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"args": {}})
        assert_refused_or_rejected(stack, watch, response, status=422, event="unknown")


def test_empty_tool_name_is_a_clear_error(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "", "args": {}})
        assert_refused_or_rejected(stack, watch, response, status=422, event="unknown")


def test_ten_thousand_character_tool_name_is_unknown_and_not_echoed_in_full(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": LONG, "args": {}})
        assert_refused_or_rejected(stack, watch, response, status=422, event="unknown")
    rows = watch.rows(watch.after)
    assert all(len(row["tool"] or "") < 1000 for row in rows)


@pytest.mark.parametrize(
    "tool",
    ["echo\u0000", "\u0000", "ec\nho", "\ud800"],
    ids=["nul-suffix", "nul", "newline", "lone-surrogate"],
)
def test_tool_name_with_control_characters_is_unknown(stack: Stack, tool: str) -> None:
    with audit_watch(stack) as watch:
        # json.dumps escapes these, so the body itself is valid JSON and valid UTF-8.
        response = post_json(stack, {"tool": tool, "args": {}})
        assert_refused_or_rejected(stack, watch, response, status=422, event="unknown")


def test_ten_thousand_character_tool_name_in_tool_lookup_is_404(stack: Stack) -> None:
    with stack.client() as http:
        assert_clear_error(http.get(f"/v1/tools/{LONG}"), 404)


# -- the arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [[1, 2], "x", 7, True, None], ids=["array", "string", "number", "bool", "null"]
)
def test_args_that_are_not_an_object_are_invalid(stack: Stack, args: Any) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": args})
        if response.status_code == 200:
            body = assert_rejected(stack, watch, response, "invalid")
            assert body["error"].startswith("invalid arguments: ")
            assert body["tool"] == "echo"
        else:
            assert_refused(stack, watch, response, 422)


def test_args_just_over_256_kib_are_413(stack: Stack) -> None:
    args = {"blob": "a" * (256 * 1024)}
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": args})
        assert_clear_error(response, 413)
        assert watch.events() in ([], ["invalid"])


def test_args_of_a_megabyte_are_413(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": {"blob": "a" * (1024 * 1024)}})
        assert_refused(stack, watch, response, 413)


def test_args_just_under_the_limit_are_accepted(stack: Stack) -> None:
    args = {"blob": "a" * (255 * 1024)}
    with stack.client() as http:
        response = http.post("/v1/calls", json={"tool": "value", "args": {"value": 1, **args}})
    assert response.status_code == 200, response.text[:500]
    assert response.json()["status"] == "queued"
    with stack.client() as http:
        done = http.get(f"/v1/calls/{response.json()['call_id']}", params={"wait_s": 30})
    assert done.json()["status"] == "succeeded"


@pytest.mark.parametrize("opener", ["[", '{"a":'], ids=["arrays", "objects"])
def test_args_nested_ten_thousand_deep_are_422(stack: Stack, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    nested = opener * 10_000 + "1" + closer * 10_000
    with audit_watch(stack) as watch:
        response = post(stack, f'{{"tool": "echo", "args": {{"deep": {nested}}}}}'.encode())
        assert_refused(stack, watch, response, 422)


def test_body_nested_ten_thousand_deep_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b"[" * 10_000 + b"]" * 10_000)
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize("depth", [500, 900, 990])
def test_args_nested_just_under_the_parser_limit_never_500(stack: Stack, depth: int) -> None:
    nested = "[" * depth + "1" + "]" * depth
    with stack.client() as http:
        response = http.post(
            "/v1/calls",
            content=f'{{"tool": "echo", "args": {{"deep": {nested}}}, "wait_s": 30}}'.encode(),
            headers=JSON,
        )
    assert response.status_code != 500, response.text[:500]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if response.status_code == 200 and body.get("call_id"):
        # Accepted: then it finished as a value, one way or the other.
        assert body["status"] in ("succeeded", "failed"), body
    else:
        assert_clear_error(response, 200, 413, 422)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_422(stack: Stack, literal: str) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, f'{{"tool": "echo", "args": {{"x": {literal}}}}}'.encode())
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize("field", ["wait_s", "tool"])
def test_nan_literal_outside_args_is_422(stack: Stack, field: str) -> None:
    body = {"tool": "echo", "args": {}, field: "__NAN__"}
    content = json.dumps(body).replace('"__NAN__"', "NaN").encode()
    with audit_watch(stack) as watch:
        response = post(stack, content)
        assert_refused(stack, watch, response, 422)


def test_float_overflowing_to_infinity_is_a_clear_error(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b'{"tool": "echo", "args": {"x": 1e400}}')
        assert_refused_or_rejected(stack, watch, response, status=422, event="invalid")


def test_ten_thousand_digit_integer_is_a_clear_error(stack: Stack) -> None:
    digits = "9" * 10_000
    with audit_watch(stack) as watch:
        response = post(stack, f'{{"tool": "echo", "args": {{"n": {digits}}}}}'.encode())
        assert_refused_or_rejected(stack, watch, response, status=422, event="invalid")
    # Python's advice to raise its own limit is no advice to a caller.
    assert "sys." not in response.text


def _accepted_or_refused(response: httpx.Response) -> dict[str, Any]:
    """A lone surrogate escape is valid JSON: accepting it or refusing it are both clear."""
    assert response.status_code != 500, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if not (response.status_code == 200 and body.get("call_id")):
        assert_clear_error(response, 200, 422)
    return body  # type: ignore[no-any-return]


def test_lone_surrogate_in_args_with_wait_never_500(stack: Stack) -> None:
    with stack.client() as http:
        response = http.post("/v1/calls", content=SURROGATE_ARGS_WAITING, headers=JSON)
    body = _accepted_or_refused(response)
    if body.get("call_id"):
        assert body["status"] in ("succeeded", "failed"), body
        if body["status"] == "succeeded":
            assert body["value"] == {"s": "\ud800"}


def test_reading_a_call_whose_value_holds_a_lone_surrogate_never_500(stack: Stack) -> None:
    with stack.client() as http:
        submitted = http.post("/v1/calls", content=SURROGATE_ARGS, headers=JSON)
        body = _accepted_or_refused(submitted)
        if not body.get("call_id"):
            return
        read = http.get(f"/v1/calls/{body['call_id']}", params={"wait_s": 30})
    assert read.status_code == 200, read.text
    assert read.headers["content-type"].startswith("application/json")
    assert read.json()["status"] in ("succeeded", "failed")


def test_unknown_field_named_by_a_lone_surrogate_is_422(stack: Stack) -> None:
    with audit_watch(stack) as watch:
        response = post(stack, b'{"tool": "echo", "args": {}, "\\ud800": 1}')
        assert_refused(stack, watch, response, 422)


# -- other fields --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [{"tools": "echo"}, {"arguments": {}}, {"priority": 1}, {"\u0000": 1}, {LONG: 1}],
    ids=["tools", "arguments", "priority", "nul", "long-name"],
)
def test_unknown_body_field_is_422(stack: Stack, extra: dict[str, Any]) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": {}, **extra})
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize(
    "key",
    ["", LONG, 42, ["k"], "a\u0000b", "a\ud800b"],
    ids=["empty", "long", "int", "list", "nul", "lone-surrogate"],
)
def test_bad_idempotency_key_in_body_is_422(stack: Stack, key: Any) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": {}, "idempotency_key": key})
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize("key", ["", "k" * 10_000], ids=["empty", "long"])
def test_bad_idempotency_key_header_is_422(stack: Stack, key: str) -> None:
    with audit_watch(stack) as watch, stack.client() as http:
        response = http.post(
            "/v1/calls", json={"tool": "echo", "args": {}}, headers={"Idempotency-Key": key}
        )
        assert_refused(stack, watch, response, 422)


# -- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong", "Token abc", f"Bearer {LONG}", "Bearer \u00ff\u00fe"],
    ids=["none", "empty", "empty-bearer", "wrong", "other-scheme", "long", "latin1"],
)
def test_missing_or_bad_key_is_401(stack: Stack, authorization: str | None) -> None:
    headers = dict(JSON)
    if authorization is not None:
        headers["Authorization"] = authorization
    with audit_watch(stack) as watch, stack.client("") as http:
        response = http.post(
            "/v1/calls",
            content=json.dumps({"tool": "echo", "args": {}}).encode("latin-1"),
            headers={k: v.encode("latin-1") for k, v in headers.items()},
        )
        assert_refused(stack, watch, response, 401)


def test_missing_key_is_401_even_for_a_malformed_body(stack: Stack) -> None:
    with audit_watch(stack) as watch, stack.client("") as http:
        response = http.post("/v1/calls", content=b"\xff not json", headers=JSON)
        assert_refused(stack, watch, response, 401)


def test_revoked_key_is_401(stack: Stack) -> None:
    name = f"revoked-{uuid.uuid4().hex[:12]}"
    runtime = Runtime(stack.settings)
    try:
        token = runtime.keys.create(name, ["agent"])
        runtime.keys.revoke(name)
    finally:
        runtime.close()
    headers = {"Authorization": f"Bearer {token}"}
    with audit_watch(stack) as watch, httpx.Client(base_url=stack.base_url, timeout=60) as http:
        response = http.post("/v1/calls", json={"tool": "echo", "args": {}}, headers=headers)
        assert_refused(stack, watch, response, 401)
        for path in (f"/v1/calls/{A_CALL_ID}", "/v1/tools", "/v1/audit"):
            assert_clear_error(http.get(path, headers=headers), 401)


# -- call ids and request ids in paths -----------------------------------------------------


@pytest.mark.parametrize(
    "segment",
    [
        "%20",
        "%00",
        "call_",
        "call_" + "0" * 31,
        "call_" + "g" * 32,
        "CALL_" + "0" * 32,
        "null",
        "undefined",
        "%2F",
        "%FF",
        "..%2F..%2Faudit",
        LONG,
        "call_" + "0" * 9_995,
    ],
    ids=[
        "space",
        "nul",
        "prefix-only",
        "short",
        "not-hex",
        "upper",
        "null",
        "undefined",
        "slash",
        "bad-utf8",
        "traversal",
        "10k",
        "10k-call-prefix",
    ],
)
def test_malformed_call_id_is_404(stack: Stack, segment: str) -> None:
    with audit_watch(stack) as watch, stack.client() as http:
        for response in (
            http.get(f"/v1/calls/{segment}"),
            http.get(f"/v1/calls/{segment}", params={"wait_s": 1}),
            http.delete(f"/v1/calls/{segment}"),
        ):
            body = assert_clear_error(response, 404)
            assert set(body) == {"ok", "error"}
        assert watch.events() == []


def test_empty_call_id_is_a_clear_error(stack: Stack) -> None:
    with audit_watch(stack) as watch, stack.client() as http:
        for method in ("GET", "DELETE"):
            # Answered here, as JSON: not a redirect to another route.
            response = http.request(method, "/v1/calls/")
            assert_clear_error(response, 404, 405)
        assert watch.events() == []


@pytest.mark.parametrize(
    "segment", ["%20", "%00", "req-", LONG], ids=["space", "nul", "prefix", "10k"]
)
def test_malformed_request_id_is_404(stack: Stack, segment: str) -> None:
    with audit_watch(stack) as watch:
        with stack.client("approver") as http:
            assert_clear_error(http.get(f"/v1/approvals/{segment}"), 404)
            for action in ("approve", "deny"):
                assert_clear_error(http.post(f"/v1/approvals/{segment}/{action}", json={}), 404)
        assert watch.events() == []


def test_empty_request_id_is_a_clear_error(stack: Stack) -> None:
    with audit_watch(stack) as watch, stack.client("approver") as http:
        for action in ("approve", "deny"):
            response = http.post(f"/v1/approvals//{action}", json={})
            assert_clear_error(response, 404, 405)
        assert watch.events() == []


# -- wait_s --------------------------------------------------------------------------------


BAD_WAITS = [-1, -0.001, 1e9, 10**400, "abc", "NaN", "inf", "5", True, [], {}]
BAD_WAIT_IDS = [
    "negative",
    "tiny-negative",
    "huge",
    "400-digits",
    "abc",
    "nan-string",
    "inf-string",
    "number-in-a-string",
    "bool",
    "list",
    "obj",
]


@pytest.mark.parametrize("wait_s", BAD_WAITS, ids=BAD_WAIT_IDS)
def test_bad_wait_s_in_body_is_422_and_submits_nothing(stack: Stack, wait_s: Any) -> None:
    with audit_watch(stack) as watch:
        response = post_json(stack, {"tool": "echo", "args": {}, "wait_s": wait_s})
        assert_refused(stack, watch, response, 422)


@pytest.mark.parametrize(
    "wait_s",
    ["-1", "1e9", "9" * 10_000, "abc", "NaN", "nan", "inf", "-inf", "", "1e400", "0x10"],
    ids=[
        "negative",
        "huge",
        "10k-digits",
        "abc",
        "NaN",
        "nan",
        "inf",
        "-inf",
        "empty",
        "overflow",
        "hex",
    ],
)
def test_bad_wait_s_in_query_is_422(stack: Stack, pending_call: str, wait_s: str) -> None:
    with audit_watch(stack) as watch, stack.client() as http:
        response = http.get(f"/v1/calls/{pending_call}", params={"wait_s": wait_s})
        assert_refused(stack, watch, response, 422)
        # The call is untouched.
        assert http.get(f"/v1/calls/{pending_call}").json()["status"] == "pending"


@pytest.mark.parametrize(
    "wait_s", [-1, 1e9, "abc", "NaN", "5"], ids=["negative", "huge", "abc", "nan", "string"]
)
def test_bad_wait_s_on_approve_is_422(stack: Stack, wait_s: Any) -> None:
    with audit_watch(stack) as watch, stack.client("approver") as http:
        response = http.post(f"/v1/approvals/{A_REQUEST_ID}/approve", json={"wait_s": wait_s})
        assert_clear_error(response, 404, 422)
        assert watch.events() == []


# -- /v1/audit query parameters ------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"after_seq": "abc"},
        {"after_seq": "-1"},
        {"after_seq": "1.5"},
        {"after_seq": "9" * 10_000},
        {"after_seq": ""},
        {"limit": "abc"},
        {"limit": "NaN"},
        {"limit": "inf"},
        {"limit": "0"},
        {"limit": "-5"},
        {"limit": "1e3"},
        {"limit": "100000000"},
        {"limit": "9" * 10_000},
        {"event": "nope"},
        {"event": LONG},
    ],
    ids=lambda p: f"{next(iter(p))}={next(iter(p.values()))[:12]}",
)
def test_bad_audit_query_is_422(stack: Stack, params: dict[str, str]) -> None:
    with audit_watch(stack) as watch, stack.client("operator") as http:
        response = http.get("/v1/audit", params=params)
        body = assert_clear_error(response, 422)
        assert set(body) == {"ok", "error"}
        assert watch.events() == []


@pytest.mark.parametrize("limit", ["abc", "0", "-1", "501", "9" * 10_000])
def test_bad_approvals_limit_is_422_as_the_audits_is(stack: Stack, limit: str) -> None:
    # Refused in toolrouter's words, as the audit page's limit is; never clamped.
    with stack.client("approver") as http:
        response = http.get("/v1/approvals", params={"limit": limit})
    body = assert_clear_error(response, 422)
    assert body["error"].startswith("limit must be"), body


def test_audit_query_with_long_filters_is_a_clear_error(stack: Stack) -> None:
    with stack.client("operator") as http:
        response = http.get("/v1/audit", params={"tool": LONG, "call_id": LONG})
    assert response.status_code in (404, 422), response.text[:500]
    assert response.json()["ok"] is False


# -- query parameters no route reads -------------------------------------------------------


def calls_keyed(stack: Stack, key: str) -> int:
    """How many calls the database holds under the idempotency key ``key``."""
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.reading() as conn:
            count = select(func.count()).select_from(calls).where(calls.c.idempotency_key == key)
            return int(conn.execute(count).scalar_one())
    finally:
        runtime.close()


@pytest.mark.parametrize(
    ("who", "path", "known", "name"),
    [
        ("operator", "/v1/notifications", {"status": "failed"}, "stauts"),
        ("operator", "/v1/audit", {"limit": "5", "event": "queued"}, "evnt"),
        ("approver", "/v1/approvals", {"status": "pending", "limit": "5"}, "page"),
        ("agent", "/v1/tools", {}, "q"),
        ("agent", "/v1/tools/echo", {}, "verbose"),
    ],
)
def test_a_query_parameter_its_route_does_not_read_is_422(
    stack: Stack, who: str, path: str, known: dict[str, str], name: str
) -> None:
    with audit_watch(stack) as watch, stack.client(who) as http:
        assert http.get(path, params=known).status_code == 200
        response = http.get(path, params={**known, name: "x"})
        assert_refused(stack, watch, response, 422)
    assert response.json()["error"] == f"unknown query parameter: {name}"


@pytest.mark.parametrize(
    ("name", "shown"),
    [("a\x00b", "a\\u0000b"), ("", '""'), (LONG, "x" * MAX_ECHOED_NAME + "\u2026")],
    ids=["nul", "empty", "long"],
)
def test_an_unknown_query_parameter_is_named_safely(stack: Stack, name: str, shown: str) -> None:
    with stack.client("operator") as http:
        response = http.get("/v1/notifications", params={name: "1"})
    assert_clear_error(response, 422)
    assert response.json()["error"] == f"unknown query parameter: {shown}"


def test_a_call_submitted_with_a_query_parameter_is_refused_and_nothing_is_stored(
    stack: Stack,
) -> None:
    """``POST /v1/calls`` reads no query: ``?wait=5`` (for ``wait_s``) neither waits nor
    passes unseen."""
    key = f"query-{uuid.uuid4().hex}"
    body = {"tool": "echo", "args": {}, "idempotency_key": key}
    with audit_watch(stack) as watch, stack.client() as http:
        response = http.post("/v1/calls", json=body, params={"wait": "5"})
        assert_refused(stack, watch, response, 422)
    assert response.json()["error"] == "unknown query parameter: wait"
    assert calls_keyed(stack, key) == 0
    with stack.client() as http:
        assert "call_id" in http.post("/v1/calls", json=body).json()
    assert calls_keyed(stack, key) == 1


def test_reading_a_call_with_a_query_parameter_it_does_not_read_is_422(
    stack: Stack, pending_call: str
) -> None:
    with audit_watch(stack) as watch, stack.client() as http:
        response = http.get(f"/v1/calls/{pending_call}", params={"wait": "5"})
        assert_refused(stack, watch, response, 422)
        assert response.json()["error"] == "unknown query parameter: wait"
        waited = http.get(f"/v1/calls/{pending_call}", params={"wait_s": "0.1"})
    assert waited.status_code == 200, waited.text
    assert waited.json()["status"] == "pending"


@pytest.mark.parametrize(
    ("path", "statuses"),
    [
        ("/healthz", (200,)),
        ("/readyz", (200,)),
        ("/metrics", (200,)),
        ("/openapi.json", (200,)),
        ("/docs", (200,)),
        ("/ui/", (200, 303, 307)),
        ("/ui/static/inbox.css", (200,)),
    ],
)
def test_pages_outside_the_json_api_take_any_query_parameter(
    stack: Stack, path: str, statuses: tuple[int, ...]
) -> None:
    """A browser, a proxy or a monitor adds its own (a cache buster, a sign-in's ``next``):
    only ``/v1/`` is checked."""
    with stack.client("") as http:
        response = http.get(path, params={"v": "123", "next": "/ui/"})
    assert response.status_code in statuses, response.text[:500]


# -- nothing above changed the log ---------------------------------------------------------


def test_audit_chain_still_verifies_after_bad_input(stack: Stack) -> None:
    runtime = Runtime(stack.settings)
    try:
        report = runtime.verify_audit()
    finally:
        runtime.close()
    assert report.ok, report.problems
    assert report.checked > 0


@pytest.mark.parametrize(
    "params",
    [{"tool": "a\x00b"}, {"call_id": "a\x00b"}, {"call_id": "x" * 10_000}, {"tool": "t" * 300}],
)
def test_audit_filters_that_name_nothing_are_422(stack: Stack, params: dict[str, str]) -> None:
    with stack.client("operator") as http:
        response = http.get("/v1/audit", params=params)
    assert response.status_code in (404, 422)
    body = response.json()
    assert body["ok"] is False and body["error"]
