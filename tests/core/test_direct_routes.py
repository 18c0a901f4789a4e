"""``router.api.direct_routes``: ``POST /v1/calls`` and ``GET /v1/calls/{id}`` reach their
endpoints without FastAPI's routing, and answer exactly as through it. The same requests
go to an app with the direct routes and to one without; real database (both backends),
real Redis, the app driven in process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import FastAPI

from router.api import routes_calls
from router.api.app import create_app
from router.api.direct_routes import direct_for
from router.runtime import Runtime

# Ids differ between the two runs; everything else must not.
IDS = re.compile(r"\b(call|req|batch)[-_][0-9a-f]{32}\b")

# (caller, method, path, body or None, extra headers). ``{last}`` is the call id the run
# got last, ``{run}`` tells the two runs' idempotency keys apart.
REQUESTS: list[tuple[str | None, str, str, Any, dict[str, str]]] = [
    ("agent", "POST", "/v1/calls", {"tool": "echo", "args": {"x": 1}}, {}),
    ("agent", "GET", "/v1/calls/{last}", None, {}),
    ("agent", "GET", "/v1/calls/{last}?wait_s=0", None, {}),
    ("agent", "GET", "/v1/calls/{last}?wait_s=abc", None, {}),
    ("agent", "GET", "/v1/calls/{last}?wait_s=-1", None, {}),
    ("agent2", "GET", "/v1/calls/{last}", None, {}),
    ("agent", "GET", "/v1/calls/call_" + "0" * 32, None, {}),
    ("agent", "GET", "/v1/calls/not-a-call-id", None, {}),
    ("agent", "GET", "/v1/calls/{last}/", None, {}),
    ("agent", "GET", "/v1/calls/", None, {}),
    (None, "GET", "/v1/calls/{last}", None, {}),
    (None, "POST", "/v1/calls", {"tool": "echo"}, {}),
    ("bad", "POST", "/v1/calls", {"tool": "echo"}, {}),
    ("approver", "POST", "/v1/calls", {"tool": "echo"}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "high_echo", "args": {"x": 2}}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "no_such_tool"}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "strict", "args": {"nope": True}}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "capability": "x"}, {}),
    ("agent", "POST", "/v1/calls", {"args": {}}, {}),
    ("agent", "POST", "/v1/calls", {"tool": 7}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "surprise": 1}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "wait_s": "soon"}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "wait_s": 0}, {}),
    ("agent", "POST", "/v1/calls", [1, 2], {}),
    ("agent", "POST", "/v1/calls", b"{not json", {}),
    ("agent", "POST", "/v1/calls", b"", {}),
    ("agent", "POST", "/v1/calls", b"\xff\xfe", {}),
    ("agent", "POST", "/v1/calls", b'{"tool": "echo", "args": NaN}', {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "args": {"big": "x" * 300_000}}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "idempotency_key": "k-{run}"}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "idempotency_key": "k-{run}"}, {}),
    ("agent", "POST", "/v1/calls", {"tool": "echo"}, {"Idempotency-Key": "h-{run}"}),
    (
        "agent",
        "POST",
        "/v1/calls",
        {"tool": "echo", "args": {"y": 1}},
        {"Idempotency-Key": "h-{run}"},
    ),
    ("agent", "POST", "/v1/calls", {"tool": "echo", "idempotency_key": 5}, {}),
    ("agent", "POST", "/v1/calls/", {"tool": "echo"}, {}),
    ("agent", "PUT", "/v1/calls", {"tool": "echo"}, {}),
    ("agent", "POST", "/v1/calls?wait=5", {"tool": "echo"}, {}),
    ("agent", "GET", "/v1/calls/{last}?wait_s=0&wait=5", None, {}),
    (None, "GET", "/v1/calls/{last}?wait=5", None, {}),
]


def make_app(runtime: Runtime, *, direct_routes: bool) -> FastAPI:
    return create_app(runtime, direct_routes=direct_routes)


async def answers(app: FastAPI, keys: dict[str, str], run: str) -> list[tuple[int, Any]]:
    """Every request of ``REQUESTS`` through ``app``: (status, body with ids masked)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    got: list[tuple[int, Any]] = []
    last = ""
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        for who, method, path, body, extra in REQUESTS:
            headers = {k: v.format(run=run) for k, v in extra.items()}
            if who is not None:
                headers["Authorization"] = f"Bearer {keys.get(who, 'tr_not_a_key')}"
            if isinstance(body, bytes):
                content = body
            elif body is None:
                content = b""
            else:
                content = json.dumps(body).replace("{run}", run).encode()
            if body is not None:
                headers["Content-Type"] = "application/json"
            response = await client.request(
                method, path.format(last=last), content=content, headers=headers
            )
            try:
                answer: Any = response.json()
            except ValueError:
                answer = response.text
            if isinstance(answer, dict) and isinstance(answer.get("call_id"), str):
                last = answer["call_id"]
            got.append((response.status_code, json.loads(IDS.sub(r"\1_X", json.dumps(answer)))))
    return got


@pytest.fixture
def keys(runtime: Runtime) -> dict[str, str]:
    return {
        "agent": runtime.keys.create("agent", ["agent"]),
        "agent2": runtime.keys.create("agent2", ["agent"]),
        "approver": runtime.keys.create("approver", ["approver"]),
    }


def test_the_direct_routes_answer_every_request_as_fastapi_routing_does(
    runtime: Runtime, keys: dict[str, str]
) -> None:
    direct = asyncio.run(answers(make_app(runtime, direct_routes=True), keys, "direct"))
    routed = asyncio.run(answers(make_app(runtime, direct_routes=False), keys, "routed"))
    for request, one, other in zip(REQUESTS, direct, routed, strict=True):
        assert one == other, request
    statuses = {status for status, _ in direct}
    # The list reaches success and every kind of refusal, not one answer many times.
    assert {200, 401, 403, 404, 405, 413, 422} <= statuses, statuses


def test_an_unexpected_error_is_a_json_500_both_ways(
    runtime: Runtime, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug with a secret in its message")

    monkeypatch.setattr(runtime.calls, "get", broken)

    async def read(app: FastAPI) -> tuple[int, Any]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            response = await client.get(
                "/v1/calls/call_" + "0" * 32,
                headers={"Authorization": f"Bearer {keys['agent']}"},
            )
            return response.status_code, response.json()

    for direct_routes in (True, False):
        app = make_app(runtime, direct_routes=direct_routes)
        assert asyncio.run(read(app)) == (500, {"ok": False, "error": "internal error"})


def test_the_hot_endpoints_do_not_go_through_fastapis_request_handling(
    runtime: Runtime, keys: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted where FastAPI solves a route's dependencies, once per routed request."""
    solved: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counting(*args: Any, **kwargs: Any) -> Any:
        solved.append(kwargs["request"].url.path)
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counting)

    async def submit_and_read(app: FastAPI) -> None:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {keys['agent']}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            submitted = await client.post("/v1/calls", json={"tool": "echo"}, headers=headers)
            assert submitted.status_code == 200, submitted.text
            read = await client.get(f"/v1/calls/{submitted.json()['call_id']}", headers=headers)
            assert read.status_code == 200, read.text
            assert (await client.get("/v1/tools", headers=headers)).status_code == 200

    asyncio.run(submit_and_read(make_app(runtime, direct_routes=True)))
    assert solved == ["/v1/tools"]  # the other routes still go through FastAPI
    solved.clear()
    asyncio.run(submit_and_read(make_app(runtime, direct_routes=False)))
    assert sorted(solved) == sorted(["/v1/calls", solved[1], "/v1/tools"])
    assert solved[1].startswith("/v1/calls/call_")


@pytest.mark.parametrize(
    ("method", "path", "operation"),
    [("POST", "/v1/calls", "/v1/calls"), ("GET", "/v1/calls/call_x", "/v1/calls/{call_id}")],
)
def test_each_direct_route_reads_the_query_parameters_its_operation_declares(
    method: str, path: str, operation: str
) -> None:
    """``router.api.query_names`` refuses any other: the same names both ways."""
    app = FastAPI()
    app.include_router(routes_calls.router)
    parameters = app.openapi()["paths"][operation][method.lower()].get("parameters", [])
    direct = direct_for({"type": "http", "method": method, "path": path})
    assert direct is not None
    assert direct.query == {p["name"] for p in parameters if p["in"] == "query"}
