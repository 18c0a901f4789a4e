"""The Python client (``router.Client`` and ``router.AsyncClient``) against the real stack."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from router import AsyncClient, CallResult, Client
from router.client import BatchStatus, endpoint
from router.errors import Forbidden, NotAuthenticated, NotFound
from router.fast_transport import FastTransport, SyncFastTransport

from .stack import Stack, free_port

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


def test_an_unreachable_api_is_an_unavailable_value() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "key") as agent:
        result = agent.call("echo", {}, wait_s=1)
    assert result.status == "unavailable"
    assert result.error is not None and result.error.startswith("unavailable: ")


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
        assert decided.result is not None and decided.result.value == {"pay": 1}
        denied = approver.deny(other.request_id, reason="no")
        assert (denied.status, denied.call_id) == ("denied", other.call_id)
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


def test_async_client_calls_share_keep_alive_connections(stack: Stack) -> None:
    """40 calls in flight through ``FastTransport``: every one answered, on at most 40
    connections, which the next calls reuse instead of opening new ones."""

    async def scenario() -> None:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            assert agent._fast is not None
            transport = agent._fast._transport
            assert isinstance(transport, FastTransport)
            for _ in range(2):
                results = await asyncio.gather(
                    *(agent.call("echo", {"i": i}, wait_s=WAIT_S) for i in range(40))
                )
                assert [r.value for r in results] == [{"i": i} for i in range(40)]
                assert 1 <= transport._open <= 40
            opened = transport._open
            for i in range(5):
                assert (await agent.call("echo", {"one": i}, wait_s=WAIT_S)).ok
            assert transport._open == opened

    asyncio.run(scenario())


def test_client_calls_from_threads_share_keep_alive_connections(stack: Stack) -> None:
    """The blocking client's calls go through ``SyncFastTransport``: eight threads at
    once, every call answered with its own result, on at most eight connections, which
    later calls reuse instead of opening new ones."""
    with client(stack) as agent:
        assert agent._fast is not None
        transport = agent._fast._transport
        assert isinstance(transport, SyncFastTransport)

        def calls(thread: int) -> list[Any]:
            return [
                agent.call("echo", {"t": thread, "i": i}, wait_s=WAIT_S).value for i in range(10)
            ]

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(calls, range(8)))
        assert answers == [[{"t": t, "i": i} for i in range(10)] for t in range(8)]
        assert 1 <= transport._open <= 8
        opened = transport._open
        for i in range(5):
            done = agent.call("echo", {"one": i}, wait_s=WAIT_S)
            assert done.ok and done.call_id is not None
            assert agent.result(done.call_id).value == {"one": i}
        assert transport._open == opened


def test_async_client_spreads_many_calls_over_small_pools(stack: Stack) -> None:
    """Over httpx's own transport (HTTPS, or a proxy from the environment): 40 calls in
    flight, every one answered, over pools of at most 8 connections each (one big
    httpcore pool costs quadratic CPU in its connections)."""

    async def scenario() -> list[int]:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            agent._fast = None  # as for an API behind HTTPS or a proxy
            results = await asyncio.gather(
                *(agent.call("echo", {"i": i}, wait_s=WAIT_S) for i in range(40))
            )
            assert [r.value for r in results] == [{"i": i} for i in range(40)]
            pools = agent._pools._pools
            sizes = [len(pool._transport._pool.connections) for pool in pools]  # type: ignore[attr-defined]
            # One call at a time afterwards reuses the open pools and opens no new one.
            assert (await agent.call("echo", {"one": 1}, wait_s=WAIT_S)).ok
            assert len(agent._pools._pools) == len(pools)
            return sizes

    sizes = asyncio.run(scenario())
    assert len(sizes) >= 5, sizes
    assert max(sizes) <= 8, sizes


def test_clients_share_one_tls_context_instead_of_loading_the_ca_bundle_per_pool(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx loads the CA bundle for every client it builds (40 ms), even for plain http;
    the async client builds one per pool it opens, on the event loop, mid-burst."""
    import ssl

    from router import wire

    wire.tls_context()  # the process's one load
    loads: list[object] = []
    real = ssl.create_default_context

    def counting(*args: object, **kwargs: object) -> ssl.SSLContext:
        loads.append(args or kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl, "create_default_context", counting)

    async def scenario() -> int:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            agent._fast = None  # calls over httpx's pools, as for HTTPS or a proxy
            results = await asyncio.gather(
                *(agent.call("echo", {"i": i}, wait_s=WAIT_S) for i in range(24))
            )
            assert all(result.ok for result in results)
            return len(agent._pools._pools)

    with client(stack) as agent:
        assert agent.call("echo", {"x": 1}, wait_s=WAIT_S).ok
    assert asyncio.run(scenario()) >= 3
    assert loads == []


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
def test_the_prebuilt_calls_url_is_the_one_httpx_would_build(base_url: str) -> None:
    with httpx.Client(base_url=base_url) as http:
        expected = http.build_request("POST", "/v1/calls").url
    assert endpoint(base_url, "/v1/calls") == expected


def test_responses_that_set_no_cookie_skip_httpxs_cookie_jar(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx builds a urllib request per response for its cookie jar; the clients skip
    that for the API's answers (which set no cookie), not for a response that sets one."""
    passed: list[str] = []
    compat = httpx.Cookies._CookieCompatRequest

    class Counting(compat):  # type: ignore[misc, valid-type]
        def __init__(self, request: httpx.Request) -> None:
            passed.append(request.url.path)
            super().__init__(request)

    monkeypatch.setattr(httpx.Cookies, "_CookieCompatRequest", Counting)
    setting = httpx.Response(
        200,
        headers={"set-cookie": "seen=1; Path=/"},
        request=httpx.Request("GET", stack.base_url + "/v1/calls"),
    )
    with client(stack) as agent:
        done = agent.call("echo", {"x": 1}, wait_s=WAIT_S)
        assert done.ok and done.call_id is not None
        assert agent.result(done.call_id).ok
        assert passed == []
        assert agent._fast is not None
        for jar in (agent._http.cookies, agent._fast.cookies):
            jar.extract_cookies(setting)
            assert jar.get("seen") == "1"
        assert passed == ["/v1/calls", "/v1/calls"]

    async def asynchronous() -> None:
        async with AsyncClient(stack.base_url, stack.keys["agent"]) as agent:
            assert (await agent.call("echo", {"x": 2}, wait_s=WAIT_S)).ok  # FastTransport
            assert (await agent.batch([{"tool": "echo", "args": {}}])).accepted == 1
            assert passed == ["/v1/calls"] * 2
            (http,) = agent._pools._pools
            assert agent._fast is not None
            for jar in (http.cookies, agent._fast.cookies):
                jar.extract_cookies(setting)
                assert jar.get("seen") == "1"
            assert len(passed) == 4

    asyncio.run(asynchronous())
