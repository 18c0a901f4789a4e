"""The Python client (``router.Client`` and ``router.AsyncClient``): against the real stack,
then against a scripted server (``tests.scripted_http``) for what the network and a server
may do on the way, each such test with both clients."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from router import AsyncClient, CallResult, Client, Unavailable
from router.client import BatchStatus, Routed, api_requests
from router.errors import BadRequest, Forbidden, NotAuthenticated, NotFound, RequestError

from ..support.launcher import free_port
from ..support.scripted_http import (
    Driven,
    ScriptedServer,
    Seen,
    answer,
    echo_after,
    echo_result,
    echo_together,
    tls_files,
)
from ..support.stack import Stack

WAIT_S = 30


def client(stack: Stack, key: str = "agent") -> Client:
    return Client(stack.base_url, stack.keys[key])


def test_call_returns_a_typed_frozen_result(stack: Stack) -> None:
    with client(stack) as agent:
        result = agent.call("echo", {"x": 1}, wait_s=WAIT_S)
    assert isinstance(result, CallResult)
    assert (result.ok, result.status, result.tool, result.value) == (
        True,
        "succeeded",
        "echo",
        {"x": 1},
    )
    assert result.call_id is not None and result.call_id.startswith("call_")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "failed"  # type: ignore[misc]


def test_submit_then_result_waits_for_the_outcome(stack: Stack) -> None:
    with client(stack) as agent:
        queued = agent.submit("value", {"value": None})
        assert queued.status in ("queued", "running", "succeeded")
        assert queued.call_id is not None
        done = agent.result(queued.call_id, wait_s=WAIT_S)
    assert (done.ok, done.value, done.terminal) == (True, None, True)


def test_failures_and_refusals_are_values_not_exceptions(stack: Stack) -> None:
    key = f"client-{uuid.uuid4().hex}"
    with client(stack) as agent:
        failed = agent.call("value_error", {"message": "no funds"}, wait_s=WAIT_S)
        unknown = agent.call("nope", {})
        first = agent.submit("echo", {"n": 1}, idempotency_key=key)
        conflict = agent.submit("echo", {"n": 2}, idempotency_key=key)
    assert (failed.ok, failed.status, failed.error, failed.error_type) == (
        False,
        "failed",
        "no funds",
        "ValueError",
    )
    assert (unknown.status, unknown.error) == ("rejected", "unknown tool: nope")
    assert first.call_id is not None
    assert (conflict.status, conflict.http_status) == ("conflict", 409)
    assert conflict.error == "idempotency key reused with different arguments"


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_an_unreachable_api_is_an_unavailable_value(flavour: str) -> None:
    with Driven(flavour, f"http://127.0.0.1:{free_port()}") as agent:
        result = agent.call("echo", {}, wait_s=1)
        assert result.status == "unavailable"
        assert result.error.startswith("unavailable: cannot reach the API: ")
        with pytest.raises(Unavailable, match="cannot reach the API"):
            agent.batch_status("batch_1")


@pytest.mark.parametrize("base_url", ["127.0.0.1:8000", "localhost:8000", "ftp://h/", ""])
def test_a_base_url_that_is_no_http_url_is_refused_by_both_clients(base_url: str) -> None:
    for make in (Client, AsyncClient):
        with pytest.raises(ValueError, match="base_url must be an http:// or https:// URL"):
            make(base_url, "key")


def test_arguments_that_are_no_mapping_are_refused_before_anything_is_sent(flavour: str) -> None:
    with Driven(flavour, f"http://127.0.0.1:{free_port()}") as agent:
        for method in ("call", "submit", "explain"):
            with pytest.raises(TypeError, match=r"args must be a mapping .*, not str"):
                getattr(agent, method)("echo", "notadict")


def test_callers_mistakes_raise(stack: Stack) -> None:
    with Client(stack.base_url, "not-a-key") as stranger, pytest.raises(NotAuthenticated):
        stranger.call("echo", {})
    with client(stack) as agent, pytest.raises(NotFound):
        agent.result("call_" + "0" * 32)
    with client(stack) as agent:
        gated = agent.submit("high_echo", {"own": True})
        assert gated.request_id is not None
        with pytest.raises(Forbidden, match="requester cannot approve own request"):
            agent.approve(gated.request_id)


def test_approver_lists_approves_with_wait_and_denies(stack: Stack) -> None:
    with client(stack) as agent, client(stack, "approver") as approver:
        gated = agent.submit("high_echo", {"pay": 1})
        other = agent.submit("high_echo", {"pay": 2})
        assert gated.pending and gated.request_id is not None
        assert other.request_id is not None
        listed = {item["request_id"] for item in approver.approvals()}
        assert {gated.request_id, other.request_id} <= listed
        decided = approver.approve(gated.request_id, reason="ok", wait_s=WAIT_S)
        assert decided.released and decided.status == "approved"
        assert (decided.request_id, decided.call_id) == (gated.request_id, gated.call_id)
        assert decided.result is not None and decided.result.value == {"pay": 1}
        denied = approver.deny(other.request_id, reason="no")
        assert (denied.status, denied.request_id, denied.call_id) == (
            "denied",
            other.request_id,
            other.call_id,
        )
        assert other.call_id is not None
        assert agent.result(other.call_id).denied
        with pytest.raises(NotFound):
            approver.approve(gated.request_id)


def test_batch_status_and_streamed_results(stack: Stack) -> None:
    with client(stack) as agent:
        receipt = agent.batch([{"tool": "echo", "args": {"i": i}} for i in range(20)] + [{}])
        assert (receipt.total, receipt.accepted) == (21, 20)
        assert receipt.rejected == ((20, "missing field: tool"),)
        deadline = time.monotonic() + 60
        current: BatchStatus = agent.batch_status(receipt.batch_id)
        while not current.done and time.monotonic() < deadline:
            time.sleep(0.1)
            current = agent.batch_status(receipt.batch_id)
        assert current.done and current.counts["succeeded"] == 20
        items = list(agent.batch_results(receipt.batch_id))
    assert [index for index, _ in items] == list(range(20))
    assert [result.value for _, result in items] == [{"i": i} for i in range(20)]
    with client(stack, "agent2") as other, pytest.raises(NotFound):
        list(other.batch_results(receipt.batch_id))


def test_a_batch_key_beyond_ascii_names_one_batch_through_both_clients(stack: Stack) -> None:
    # NDJSON carries the key in a header, which HTTP libraries write as Latin-1.
    key = f"lot-é-✓-{uuid.uuid4().hex}"
    lines = [json.dumps({"tool": "echo", "args": {"i": 0}})]
    with client(stack) as agent:
        first = agent.batch_lines(lines, idempotency_key=key, offset=0)
        again = agent.batch([{"tool": "echo", "args": {"i": 0}}], idempotency_key=key, offset=0)

    async def from_async() -> str:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            receipt = await agent.batch_lines(lines, idempotency_key=key, offset=0)
            return receipt.batch_id

    assert again.batch_id == first.batch_id and again.replayed == 1
    assert asyncio.run(from_async()) == first.batch_id


def test_async_client_does_the_same(stack: Stack) -> None:
    async def scenario() -> None:
        async with (
            AsyncClient(stack.base_url, stack.keys["agent"]) as agent,
            AsyncClient(stack.base_url, stack.keys["approver"]) as approver,
        ):
            results = await asyncio.gather(
                *(agent.call("echo", {"i": i}, wait_s=WAIT_S) for i in range(10))
            )
            assert [r.value for r in results] == [{"i": i} for i in range(10)]
            queued = await agent.submit("echo", {"later": True})
            assert queued.call_id is not None
            assert (await agent.result(queued.call_id, wait_s=WAIT_S)).ok
            gated = await agent.submit("high_echo", {"a": 1})
            assert gated.request_id is not None
            assert gated.request_id in {r["request_id"] for r in await approver.approvals()}
            decided = await approver.approve(gated.request_id, wait_s=WAIT_S)
            assert decided.result is not None and decided.result.ok
            assert decided.request_id == gated.request_id
            receipt = await agent.batch([{"tool": "echo", "args": {"i": 1}}])
            for _ in range(600):
                if (await agent.batch_status(receipt.batch_id)).done:
                    break
                await asyncio.sleep(0.1)
            items = [item async for item in agent.batch_results(receipt.batch_id)]
            assert [(i, r.value) for i, r in items] == [(0, {"i": 1})]
            denied_gated = await agent.submit("high_echo", {"a": 2})
            assert denied_gated.request_id is not None
            assert (await approver.deny(denied_gated.request_id)).status == "denied"
            with pytest.raises(NotFound):
                await agent.result("call_" + "f" * 32)

    asyncio.run(scenario())


def test_calls_from_threads_and_tasks_at_once_each_get_their_own_answer(stack: Stack) -> None:
    with client(stack) as agent:

        def calls(thread: int) -> list[Any]:
            return [
                agent.call("echo", {"t": thread, "i": i}, wait_s=WAIT_S).value for i in range(10)
            ]

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(calls, range(8)))
    assert answers == [[{"t": t, "i": i} for i in range(10)] for t in range(8)]

    async def tasks() -> list[Any]:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            results = await asyncio.gather(
                *(agent.call("echo", {"i": i}, wait_s=WAIT_S) for i in range(40))
            )
            return [result.value for result in results]

    assert asyncio.run(tasks()) == [{"i": i} for i in range(40)]


def test_both_clients_route_a_task_as_the_api_ranks_it(stack: Stack) -> None:
    with client(stack) as agent:
        routed = agent.route("backup web search", limit=2)
        by_capability = agent.route("", capability="search.web")
        with pytest.raises(BadRequest, match="unknown strategy: magic"):
            agent.route("x", strategy="magic")
    assert isinstance(routed, Routed) and routed.fallback is None
    assert routed.strategy == "hybrid" and len(routed.candidates) == 2
    assert routed.candidates[0].tool == "search_backup"
    assert routed.candidates[0].reason.startswith("matches backup, search, web")
    assert by_capability.strategy == "capability"
    assert {c.tool for c in by_capability.candidates} >= {"search_primary", "search_backup"}

    async def routed_async() -> Routed:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            return await agent.route("backup web search", strategy="lexical", limit=2)

    lexical = asyncio.run(routed_async())
    assert lexical.strategy == "lexical"
    assert lexical.candidates[0].tool == "search_backup"


# -- on the wire, against a scripted server ---------------------------------------------


def test_requests_carry_the_key_and_reuse_one_kept_alive_connection(flavour: str) -> None:
    with ScriptedServer() as server, Driven(flavour, server.url, "k3y") as agent:
        for i in range(3):
            assert agent.call("echo", {"i": i}, wait_s=5, idempotency_key=f"k{i}").value == {"i": i}
        assert agent.result("call_1", wait_s=2.5).ok
        assert agent.cancel("call_1").ok
        assert server.connections == 1
    first, *_, result, cancel = server.seen
    assert (first.method, first.target) == ("POST", "/v1/calls")
    assert first.headers["authorization"] == "Bearer k3y"
    assert first.headers["content-type"] == "application/json"
    assert first.body == b'{"tool":"echo","args":{"i":0},"wait_s":5,"idempotency_key":"k0"}'
    assert (result.method, result.target) == ("GET", "/v1/calls/call_1?wait_s=2.5")
    assert (cancel.method, cancel.target) == ("DELETE", "/v1/calls/call_1")


@pytest.mark.parametrize("prefix", ["/api", "/api/", "/a%20b"])
def test_a_base_urls_path_prefixes_every_request_target(flavour: str, prefix: str) -> None:
    with ScriptedServer() as server, Driven(flavour, server.url + prefix) as agent:
        assert agent.call("echo", {"i": 1}).ok
        assert agent.result("call_1", wait_s=2.5).ok
    stem = prefix.rstrip("/")
    assert [(seen.method, seen.target) for seen in server.seen] == [
        ("POST", f"{stem}/v1/calls"),
        ("GET", f"{stem}/v1/calls/call_1?wait_s=2.5"),
    ]


def test_calls_in_flight_at_once_share_connections_the_next_calls_reuse(flavour: str) -> None:
    # The server answers only once 4 requests are in: calls kept on one connection would
    # each wait out its patience.
    with ScriptedServer(echo_together(4)) as server, Driven(flavour, server.url) as agent:
        calls = [("echo", {"i": i}) for i in range(16)]
        assert [r.value for r in agent.at_once("call", calls)] == [{"i": i} for i in range(16)]
        opened = server.connections
        assert server.most_open >= 4, "the calls in flight did not run side by side"
        assert opened <= 16, "more connections than calls"
        for i in range(5):
            assert agent.call("echo", {"one": i}).value == {"one": i}
        assert server.connections == opened


def test_calls_beyond_the_pool_wait_for_a_connection(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_requests, "MAX_CONNECTIONS", 2)

    with ScriptedServer(echo_after(0.05)) as server, Driven(flavour, server.url) as agent:
        results = agent.at_once("call", [("echo", {"i": i}) for i in range(7)])
        assert [r.value for r in results] == [{"i": i} for i in range(7)]
        assert server.most_open <= 2 and server.connections == 2


def test_a_connection_the_server_closed_while_idle_is_not_reused(flavour: str) -> None:
    async def answer_then_close(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(echo_result(seen))  # keep-alive, as far as the answer says
        return False

    with ScriptedServer(answer_then_close) as server, Driven(flavour, server.url) as agent:
        for i in range(3):
            assert agent.call("echo", {"i": i}).ok
            agent.pause(0.05)  # the close reaches the client
        assert server.connections == 3


def test_a_connection_idle_past_the_keep_alive_expiry_is_not_reused(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropped before the server's keep-alive timeout could close it under a request."""
    monkeypatch.setattr(api_requests, "KEEPALIVE_EXPIRY_S", 0.2)
    with ScriptedServer() as server, Driven(flavour, server.url) as agent:
        assert agent.call("echo", {}).ok
        assert agent.call("echo", {}).ok
        assert server.connections == 1
        agent.pause(0.4)
        assert agent.call("echo", {}).ok
        assert server.connections == 2


@pytest.mark.parametrize(
    "response",
    [
        b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"cut',
        b"NOT HTTP AT ALL\r\n\r\n",
        None,
    ],
    ids=["cut short", "malformed", "no answer in time"],
)
def test_what_goes_wrong_on_the_wire_is_an_unavailable_value(
    response: bytes | None, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_requests, "TIMEOUT_MARGIN_S", 0.3)

    async def spoil(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if response is None:
            await asyncio.sleep(30)
        writer.write(response or b"")
        return False

    with ScriptedServer(spoil) as server, Driven(flavour, server.url) as agent:
        for _ in range(2):
            result = agent.submit("echo", {})
            assert result.status == "unavailable", result
            assert result.error.startswith("unavailable: cannot reach the API: ")
        # The spoilt connection is gone: the next request had a connection of its own.
        assert server.connections == 2


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (answer(503, {"ok": False, "error": "unavailable: store down"}), Unavailable),
        (answer(307, {}, "location: /elsewhere"), RequestError),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nnot json", RequestError),
        # Deeper than Python's JSON parser recurses: it raises RecursionError, no ValueError.
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 200000\r\n\r\n" + b"[" * 100_000 + b"]" * 100_000,
            RequestError,
        ),
        # JSON, but not the API's: a proxy's or another service's answer.
        (answer(200, {"ok": "yes", "status": 5, "counts": []}), RequestError),
    ],
    ids=["503", "a redirect", "not JSON", "nested too deep", "another shape"],
)
def test_an_answer_that_is_no_result_is_unavailable_for_a_call_else_an_error(
    response: bytes, error: type[Exception], flavour: str
) -> None:
    """About a call, an unavailable value; to any other request, an error (the redirect is
    not followed)."""

    async def script(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(response)
        return True

    with ScriptedServer(script) as server, Driven(flavour, server.url) as agent:
        assert agent.call("echo", {}).status == "unavailable"
        with pytest.raises(error):
            agent.batch_status("batch_1")
        with pytest.raises(error):
            agent.approvals()
        assert [seen.target for seen in server.seen] == [
            "/v1/calls",
            "/v1/batches/batch_1",
            "/v1/approvals?status=pending",
        ]


def test_a_waited_calls_http_timeout_is_its_wait_plus_the_margin(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_requests, "TIMEOUT_MARGIN_S", 0.3)

    with ScriptedServer(echo_after(0.6)) as server, Driven(flavour, server.url) as agent:
        assert agent.call("echo", {"x": 1}, wait_s=1.2).value == {"x": 1}
        assert agent.submit("echo", {"x": 2}).status == "unavailable"


def test_batch_lines_go_whole_with_their_idempotency_key(flavour: str) -> None:
    async def receipt(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        total = seen.body.count(b"\n")
        body = {"batch_id": "batch_1", "total": total, "accepted": total, "rejected": []}
        writer.write(answer(200, body))
        return True

    lines = [f'{{"tool": "echo", "args": {{"i": {i}, "pad": "{"x" * 500}"}}}}' for i in range(400)]
    with ScriptedServer(receipt) as server, Driven(flavour, server.url) as agent:
        done = agent.batch_lines(lines, idempotency_key="b1", offset=3)
        assert (done.total, done.accepted) == (400, 400)
    (seen,) = server.seen
    assert (seen.method, seen.target) == ("POST", "/v1/batches?offset=3")
    assert seen.headers["idempotency-key"] == "b1"
    assert seen.headers["content-type"] == "application/x-ndjson"
    assert seen.body == "".join(line + "\n" for line in lines).encode()


def test_batch_results_stream_line_by_line(flavour: str) -> None:
    """The first result comes out before the server sent the rest (one of them longer
    than aiohttp's line limit)."""
    released = threading.Event()
    big = {"blob": "y" * 300_000}

    def chunk(item: dict[str, Any]) -> bytes:
        data = json.dumps(item).encode() + b"\n"
        return b"%x\r\n%s\r\n" % (len(data), data)

    async def stream(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(chunk({"index": 0, "status": "succeeded", "value": 0}))
        await writer.drain()
        if not await asyncio.to_thread(released.wait, 5):
            return False  # the client waited for the whole body: it gets none
        writer.write(chunk({"index": 1, "status": "succeeded", "value": big}))
        writer.write(chunk({"index": 2, "status": "failed", "error": "no"}) + b"0\r\n\r\n")
        return True

    with ScriptedServer(stream) as server, Driven(flavour, server.url) as agent:
        items = agent.first_and_rest("batch_1", released.set)
    assert [(i, r.status, r.value) for i, r in items] == [
        (0, "succeeded", 0),
        (1, "succeeded", big),
        (2, "failed", None),
    ]
    assert server.seen[0].target == "/v1/batches/batch_1/results"


@pytest.mark.parametrize("bypassed", [False, True], ids=["proxied", "NO_PROXY"])
def test_the_environments_proxy_is_honoured(
    bypassed: bool, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with ScriptedServer() as proxy, ScriptedServer() as api:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        if bypassed:
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        url = api.url if bypassed else "http://toolrouter.invalid:8000"
        with Driven(flavour, url) as agent:
            assert agent.call("echo", {"via": "proxy"}).value == {"via": "proxy"}
        assert len(api.seen if bypassed else proxy.seen) == 1
        if not bypassed:
            assert proxy.seen[0].target == "http://toolrouter.invalid:8000/v1/calls"


def test_closing_the_blocking_client_lets_a_call_in_flight_finish() -> None:
    with ScriptedServer(echo_after(0.3)) as server, ThreadPoolExecutor(1) as pool:
        agent = Client(server.url, "key")
        assert agent.call("echo", {}).ok
        in_flight = pool.submit(agent.call, "echo", {"late": True})
        deadline = time.monotonic() + 10
        while len(server.seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the server has the request
        agent.close()
        assert in_flight.result().value == {"late": True}
        with pytest.raises(RuntimeError):
            agent.call("echo", {})


def test_https_is_verified_against_the_systems_ca_bundle_with_one_tls_context(
    flavour: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = tls_files(tmp_path)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(cert, key)
    made: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    try:
        with ScriptedServer(ssl=serving) as server:
            api_requests.tls_context.cache_clear()
            with Driven(flavour, server.url) as stranger:  # the test's CA is not the system's
                assert stranger.call("echo", {}).status == "unavailable"
            api_requests.tls_context.cache_clear()
            monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # now it is
            made.clear()
            for _ in range(2):
                with Driven(flavour, server.url) as agent:
                    assert agent.call("echo", {"tls": 1}).value == {"tls": 1}
            with Driven(flavour, f"http://127.0.0.1:{free_port()}"):
                pass
            assert len(made) == 1
            assert len(server.seen) == 2
    finally:
        api_requests.tls_context.cache_clear()


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "https://api.example/prefix",
        "https://api.example/prefix/",
        "http://[::1]:9/a%20b/",
    ],
)
def test_urls_are_joined_to_the_base_url_as_httpx_joins_them(base_url: str) -> None:
    with httpx.Client(base_url=base_url) as http:
        expected = http.build_request("POST", "/v1/calls").url
    assert httpx.URL(api_requests.endpoint(base_url, "/v1/calls")) == expected
