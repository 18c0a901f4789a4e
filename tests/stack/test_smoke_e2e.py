"""The first slice end to end: HTTP in, a real worker runs the handler, the result comes back."""

from __future__ import annotations

from ..support.stack import Stack


def test_ungated_call_runs_and_returns_its_value(stack: Stack) -> None:
    with stack.client() as http:
        response = http.post("/v1/calls", json={"tool": "echo", "args": {"x": 1}, "wait_s": 20})
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["status"] == "succeeded"
    assert body["value"] == {"x": 1}
    assert body["tool"] == "echo"
    assert body["call_id"].startswith("call_")
