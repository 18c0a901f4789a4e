"""Ids and filters that name nothing: with a line break after them (a pattern anchored with
``$`` lets one through, since ``$`` also matches before a final newline), or empty. Each is
refused or unknown, and no answer echoes the break."""

from __future__ import annotations

import pytest

from ..support.stack import Stack


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (f"/v1/approvals/req-{'0' * 32}%0A", "approver"),
        (f"/v1/batches/batch_{'0' * 24}%0A", "agent"),
        (f"/v1/batches/batch_{'0' * 24}%0A/results", "agent"),
    ],
)
def test_an_id_with_a_trailing_line_break_is_unknown(stack: Stack, path: str, key: str) -> None:
    with stack.client(key) as http:
        response = http.get(path)
    assert response.status_code == 404, response.text
    assert "\n" not in response.json()["error"], response.json()


def test_a_batchs_results_are_not_read_through_an_id_with_a_line_break(stack: Stack) -> None:
    with stack.client("agent") as http:
        receipt = http.post("/v1/batches", json={"calls": [{"tool": "echo", "args": {}}]}).json()
        response = http.get(f"/v1/batches/{receipt['batch_id']}%0A/results")
    assert response.status_code == 404, response.text


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/audit?tool=", "tool must be 1-256 printable characters"),
        ("/v1/notifications?request_id=", "request_id must be 1-64 printable characters"),
    ],
)
def test_an_empty_filter_is_refused_not_read_as_no_match(
    stack: Stack, path: str, message: str
) -> None:
    with stack.client("operator") as http:
        response = http.get(path)
    assert response.status_code == 422, response.text
    assert response.json() == {"ok": False, "error": message}
