"""An HTTP tool whose service stalls past the tool's ``timeout_s``, through a real API and
a prefork worker, which keeps each call's own time limit: the stalled attempt is sent
again only when the tool is idempotent, as a reset is; one that never connects is sent
again whatever the tool."""

from __future__ import annotations

import asyncio
import re
import socket
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from router.status import CallStatus

from ..support.scripted_http import Script, ScriptedServer, Seen, answer
from ..support.stack import Stack, own_stack
from .test_mcp_tools import call, retries

REDIS_DB = 10
# Each call's first ``STALLS`` requests are answered ``STALL_S`` late, past the timeout.
STALLS = 2
STALL_S = 8
CONFIG = """
tools:
  - name: search_idem
    handler: {{http: {{url: "{url}/search"}}}}
    idempotent: true
    timeout_s: 2
    retry: {{max_attempts: 3, backoff_s: 0.1}}
  - name: search_once
    handler: {{http: {{url: "{url}/search"}}}}
    timeout_s: 2
    retry: {{max_attempts: 3, backoff_s: 0.1}}
  - name: never_connects
    handler: {{http: {{url: "{black_hole}/search"}}}}
    timeout_s: 2
    retry: {{max_attempts: 3, backoff_s: 0.1}}
"""


@contextmanager
def black_hole() -> Iterator[str]:
    """An address whose connections never open: a listener that accepts nothing, its one
    place in the kernel's queue taken, so the kernel drops each new connection's SYN."""
    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())
        host, port = listener.getsockname()
        yield f"http://{host}:{port}"


def stalling(runs: Counter[str]) -> Script:
    """A service that answers each call's first ``STALLS`` requests ``STALL_S`` late, and
    the next at once; ``runs`` counts the requests, by call id."""

    async def script(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        call_id = seen.headers["x-toolrouter-call-id"]
        runs[call_id] += 1
        if runs[call_id] <= STALLS:
            await asyncio.sleep(STALL_S)
        writer.write(answer(200, {"q": seen.json()["q"], "run": runs[call_id]}))
        return True

    return script


@pytest.fixture(scope="module")
def runs() -> Counter[str]:
    return Counter()


@pytest.fixture(scope="module")
def stall_stack(
    redis_base: str,
    runs: Counter[str],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("http-stalls")
    with (
        ScriptedServer(stalling(runs)) as service,
        black_hole() as nowhere,
        own_stack(
            state_dir,
            f"{redis_base}/{REDIS_DB}",
            request,
            keys={"agent": ["agent"], "operator": ["operator"]},
            tools=CONFIG.format(url=service.url, black_hole=nowhere),
        ) as stack,
    ):
        stack.start_api()
        stack.start_worker(concurrency=1)
        yield stack


def test_a_stalled_answer_is_sent_again_for_an_idempotent_tool(
    stall_stack: Stack, runs: Counter[str]
) -> None:
    result = call(stall_stack, "search_idem", {"q": "z"}, wait_s=45)

    assert result["status"] == CallStatus.SUCCEEDED, result
    assert result["value"] == {"q": "z", "run": STALLS + 1}
    assert runs[result["call_id"]] == STALLS + 1
    assert retries(stall_stack, result["call_id"]) == STALLS


def test_a_stalled_answer_is_never_sent_twice_for_a_tool_that_is_not_idempotent(
    stall_stack: Stack, runs: Counter[str]
) -> None:
    result = call(stall_stack, "search_once", {"q": "z"}, wait_s=45)

    assert result["status"] == CallStatus.FAILED, result
    assert (result["error"], result["error_type"]) == ("timeout after 2 s", "TimeoutError")
    assert runs[result["call_id"]] == 1
    assert retries(stall_stack, result["call_id"]) == 0


def test_a_connection_that_never_opens_is_tried_again_for_any_tool(stall_stack: Stack) -> None:
    """The request never left, so a tool that is not idempotent is sent again too."""
    result = call(stall_stack, "never_connects", {"q": "z"}, wait_s=45)

    assert result["status"] == CallStatus.FAILED, result
    assert result["error_type"] == "ConnectTimeout"
    assert re.fullmatch(r"127\.0\.0\.1:\d+: no connection within 1 s", result["error"]), result
    assert retries(stall_stack, result["call_id"]) == 2
