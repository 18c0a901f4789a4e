"""The official MCP conformance suite and the MCP Inspector's CLI against ``/mcp``.

``@modelcontextprotocol/conformance`` (npm, in ``tests/mcp_servers``) runs each of its
server scenarios against a real stack serving the tools the scenarios call
(``tests/fixtures/conformance/tools.yaml``). Its client cannot send a header, so it goes
through ``KeyProxy``, which adds the agent's bearer key and nothing else; ``/mcp`` itself
still refuses a request without one (the ``…without_the_proxy…`` tests show it). The
Inspector's CLI (``@modelcontextprotocol/inspector --cli``) lists and calls tools the same way.

Every scenario has a line below: it passes, or it belongs to a capability toolrouter does
not advertise (checked against what ``initialize`` answers: once advertised, it must pass),
or it is a known failure with the reason and the error it fails with today. A scenario that
fails otherwise, or passes while listed as failing, fails its test: trim the lists as
features land.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from router.runtime import Runtime

from ..support import services
from ..support.launcher import REPO
from ..support.mcp_key_proxy import KeyProxy
from ..support.stack import Stack, stack_env

MCP_BIN = REPO / "tests" / "mcp_servers" / "node_modules" / ".bin"
CONFORMANCE = MCP_BIN / "conformance"
INSPECTOR = MCP_BIN / "mcp-inspector"
FIXTURES = REPO / "tests" / "fixtures" / "conformance"
# Module-scoped stacks of the MCP suites take turns on this db, flushing it before and after.
REDIS_DB = 10
# One scenario makes a handful of requests; this is for a loaded machine, not a normal run.
SCENARIO_TIMEOUT_S = 90


class Failure(NamedTuple):
    """Why a scenario fails, and a piece of the error it fails with."""

    why: str
    error: str


# Capabilities toolrouter does not advertise: scenario -> the capability it needs. Unadvertised,
# the scenario must fail with "Method not found"; once advertised, it must pass.
UNADVERTISED = {
    "completion-complete": "completions",
    "resources-list": "resources",
    "resources-read-text": "resources",
    "resources-read-binary": "resources",
    "resources-templates-read": "resources",
    "resources-subscribe": "resources",
    "resources-unsubscribe": "resources",
    "prompts-list": "prompts",
    "prompts-get-simple": "prompts",
    "prompts-get-with-args": "prompts",
    "prompts-get-embedded-resource": "prompts",
    "prompts-get-with-image": "prompts",
}
METHOD_NOT_FOUND = "MCP error -32601: Method not found"

# What toolrouter does not do, by design. Its handlers run in workers, after the request
# that submitted them was answered or while it only waits: no handler can ask the client
# anything (sampling, elicitation), so their tools are not registered.
ASKS_THE_CLIENT = "a handler runs in a worker and cannot send the client a request mid-call"
NOT_SUPPORTED = {
    "tools-call-sampling": Failure(ASKS_THE_CLIENT, "Server did not request sampling from client"),
    "tools-call-elicitation": Failure(
        ASKS_THE_CLIENT, "Server did not request elicitation from client"
    ),
    "elicitation-sep1034-defaults": Failure(
        ASKS_THE_CLIENT, "Server did not request elicitation from client"
    ),
    "elicitation-sep1330-enums": Failure(
        ASKS_THE_CLIENT, "Server did not request elicitation from client"
    ),
    # SEP-1699: the server ends the response stream mid-call, the client resumes on a GET
    # stream with Last-Event-ID. /mcp keeps no session and takes POST only, so its tool,
    # test_reconnection, is not registered and the call fails as an unknown tool.
    "server-sse-polling": Failure(
        "stateless /mcp has no stream to resume a call on", "Tool call failed"
    ),
}

# Scenarios for advertised capabilities that do not pass yet (none): an entry needs its
# reason and the error it fails with, and its test says when it passes.
EXPECTED_FAILURES: dict[str, Failure] = {}

PASSING = {
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-with-logging",
    "logging-set-level",
    "json-schema-2020-12",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
}

SCENARIOS = sorted(PASSING | set(UNADVERTISED) | set(NOT_SUPPORTED) | set(EXPECTED_FAILURES))


def need_node_tools() -> None:
    if not CONFORMANCE.exists() or not INSPECTOR.exists() or shutil.which("node") is None:
        message = "run `npm ci --prefix tests/mcp_servers` (and have Node.js) for these tests"
        if services.IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def conformance_stack(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API and a worker on every tool queue, serving the fixtures (none is gated)."""
    need_node_tools()
    state_dir = tmp_path_factory.mktemp("conformance-stack")
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    env = stack_env(
        database_url=services.fresh_sqlite_url(state_dir),
        redis_url=redis_url,
        state_dir=state_dir,
        TOOLROUTER_CONFIG=str(FIXTURES / "tools.yaml"),
        CONFORMANCE_PYTHON=sys.executable,
        CONFORMANCE_FIXTURES=str(FIXTURES),
    )
    stack = Stack(env=env, state_dir=state_dir)
    runtime = Runtime(stack.settings)
    stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
    runtime.close()
    try:
        stack.start_api()
        stack.start_worker()
        yield stack
    finally:
        stack.stop_all()
        services.flush(redis_url)


@pytest.fixture(scope="module")
def proxy(conformance_stack: Stack) -> Iterator[KeyProxy]:
    with KeyProxy(conformance_stack.base_url, conformance_stack.keys["agent"]) as running:
        yield running


@pytest.fixture(scope="module")
def capabilities(conformance_stack: Stack) -> dict[str, Any]:
    """What ``/mcp`` advertises in answer to ``initialize``."""
    response = httpx.post(
        f"{conformance_stack.base_url}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "conformance-test", "version": "1"},
            },
        },
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {conformance_stack.keys['agent']}",
        },
        timeout=30,
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = jsonrpc_body(response)["result"]
    return dict(result["capabilities"])


def jsonrpc_body(response: httpx.Response) -> dict[str, Any]:
    """The one JSON-RPC message of an answer, sent as JSON or as an event stream."""
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    (message,) = [json.loads(item) for item in data if item]
    return dict(message)


def run_scenario(url: str, scenario: str, out: Path) -> list[dict[str, Any]]:
    """The checks of one scenario run against ``url``, as the suite saved them."""
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        [str(CONFORMANCE), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
    )
    saved = list(out.glob(f"server-{scenario}-*/checks.json"))
    assert len(saved) == 1, f"no checks saved (exit {run.returncode}):\n{run.stdout}{run.stderr}"
    checks: list[dict[str, Any]] = json.loads(saved[0].read_text())
    return checks


def failures(checks: list[dict[str, Any]]) -> list[str]:
    return [
        f"{check['id']}: {check.get('errorMessage', check['description'])}"
        for check in checks
        if check["status"] == "FAILURE"
    ]


def test_the_suite_has_exactly_the_scenarios_listed_here() -> None:
    need_node_tools()
    listed = subprocess.run(
        [str(CONFORMANCE), "list", "--server"],
        capture_output=True,
        text=True,
        check=True,
        timeout=SCENARIO_TIMEOUT_S,
    ).stdout
    names = {line.strip()[2:] for line in listed.splitlines() if line.strip().startswith("- ")}
    assert names == set(SCENARIOS)


def test_without_the_proxy_the_suite_is_refused(conformance_stack: Stack, tmp_path: Path) -> None:
    checks = run_scenario(f"{conformance_stack.base_url}/mcp", "server-initialize", tmp_path)
    (failed,) = failures(checks)
    assert "missing bearer key" in failed, failed


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(
    scenario: str, proxy: KeyProxy, capabilities: dict[str, Any], tmp_path: Path
) -> None:
    failed = failures(run_scenario(f"{proxy.url}/mcp", scenario, tmp_path))
    shown = "\n".join(failed)
    needs = UNADVERTISED.get(scenario)
    expected = NOT_SUPPORTED.get(scenario) or EXPECTED_FAILURES.get(scenario)
    if needs is not None and needs not in capabilities:
        assert failed and all(METHOD_NOT_FOUND in line for line in failed), shown
    elif expected is not None:
        assert failed, f"{scenario} passes now: take it off the failures listed here"
        assert any(expected.error in line for line in failed), f"{expected.why}, yet:\n{shown}"
    else:
        assert not failed, shown


# -- the MCP Inspector's CLI ----------------------------------------------------------------


def inspector(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``mcp-inspector --cli`` on ``url`` (streamable HTTP: the URL ends in ``/mcp``)."""
    return subprocess.run(
        [str(INSPECTOR), "--cli", url, *args],
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_S,
    )


def inspected(url: str, *args: str) -> dict[str, Any]:
    run = inspector(url, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def test_the_inspector_lists_the_tools_the_api_lists(
    conformance_stack: Stack, proxy: KeyProxy
) -> None:
    listed = inspected(f"{proxy.url}/mcp", "--method", "tools/list")["tools"]
    with conformance_stack.client() as http:
        registered = {tool["name"] for tool in http.get("/v1/tools").json()["tools"]}
    assert {tool["name"] for tool in listed} == {*registered, "toolrouter.call_status"}
    assert all(tool["description"] for tool in listed)


def test_the_inspector_calls_a_tool_and_sees_its_value_and_its_error(proxy: KeyProxy) -> None:
    url = f"{proxy.url}/mcp"
    text = "This is a simple text response for testing."
    ok = inspected(url, "--method", "tools/call", "--tool-name", "test_simple_text")
    assert ok["isError"] is False
    assert ok["content"] == [{"type": "text", "text": text}]
    assert ok["structuredContent"]["value"] == text
    assert ok["structuredContent"]["status"] == "succeeded"
    args = ["--tool-name", "json_schema_2020_12_tool", "--tool-arg", "name=Ada"]
    echoed = inspected(url, "--method", "tools/call", *args)
    assert echoed["structuredContent"]["value"] == {"name": "Ada"}
    failed = inspected(url, "--method", "tools/call", "--tool-name", "test_error_handling")
    assert failed["isError"] is True
    assert failed["content"] == [
        {"type": "text", "text": "This tool intentionally returns an error for testing"}
    ]


def test_the_inspector_without_the_proxy_is_refused(conformance_stack: Stack) -> None:
    run = inspector(f"{conformance_stack.base_url}/mcp", "--method", "tools/list")
    assert run.returncode != 0
    assert "missing bearer key" in run.stdout + run.stderr
