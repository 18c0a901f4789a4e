"""`toolrouter route` and the config's routing rules through the real command line: a bad
rule stops every command in one line, a rule may name an MCP server's tool, a route needs
no task where the API needs none, and its output is the API's answer alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ..support.chat_server import ChatServer
from ..support.launcher import REPO, free_port
from .test_cli import CLI_REDIS_DB, Home, ok

BAD_PATTERN = """\
tools:
  - {name: weather, handler: "router.tools.demo_tools:echo"}
routing:
  rules:
    - {pattern: "weather(|forecast", tool: weather}
"""


@pytest.mark.timeout(300)
def test_a_bad_routing_rule_stops_every_command_in_one_line_before_anything_starts(
    tmp_path: Path, redis_base: str
) -> None:
    home = Home(
        tmp_path,
        TOOLROUTER_REDIS_URL=f"{redis_base}/{CLI_REDIS_DB}",
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
    )
    (home.cwd / "toolrouter.yaml").write_text(BAD_PATTERN, encoding="utf-8")
    line = (
        "error: config error (file toolrouter.yaml): routing.rules[0].pattern: not a regular"
        " expression: missing ), unterminated subpattern at position 7\n"
    )
    for command in (["tools"], ["route", "weather"], ["api"], ["worker", "--risk", "low"], ["up"]):
        refused = home.run(*command)
        assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", line), command
    assert not home.state_dir.exists()


def test_a_rule_may_name_an_mcp_servers_tool_and_no_other(tmp_path: Path) -> None:
    servers = (
        "mcp_servers:\n"
        f"  media: {{command: {json.dumps(sys.executable)}, args: [-m, tests.fixture_mcp_server],"
        f" cwd: {json.dumps(str(REPO))}}}\n"
        "routing:\n  rules:\n"
    )
    config = tmp_path / "toolrouter.yaml"
    # Checked once the server's tools are imported: a name it does not offer is refused.
    config.write_text(servers + "    - {pattern: chart, tool: media.chrat}\n", encoding="utf-8")
    home = Home(tmp_path / "home", TOOLROUTER_CONFIG=str(config))
    refused = home.run("tools")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2,
        "",
        f"error: config error (file {config}): routing.rules[0].tool: unknown tool: media.chrat"
        " (did you mean media.chart?)\n",
    )
    config.write_text(servers + "    - {pattern: chart, tool: media.chart}\n", encoding="utf-8")
    answer = json.loads(ok(home.run("route", "draw a chart", "--strategy", "rules", "--json")))
    assert answer == {
        "ok": True,
        "strategy": "rules",
        "candidates": [{"tool": "media.chart", "score": 0.0, "reason": "rule 'chart'"}],
    }


def test_route_takes_a_capability_or_a_strategy_without_a_task_as_the_api_does(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    answer = json.loads(ok(home.run("route", "--capability", "math.add", "--json")))
    assert answer == {
        "ok": True,
        "strategy": "capability",
        "candidates": [
            {
                "tool": "add",
                "score": 0.5,
                "reason": "has capability math.add, no calls measured yet",
            }
        ],
    }
    by_cost = ok(home.run("route", "--strategy", "cost", "--limit", "1")).splitlines()
    assert by_cost[0] == "strategy: cost" and len(by_cost) == 2, by_cost
    nothing = home.run("route")
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (
        2,
        "",
        "error: strategy hybrid needs a task or a capability\n",
    )


def test_route_by_the_llm_strategy_prints_the_ranking_and_nothing_on_stderr(
    tmp_path: Path,
) -> None:
    with ChatServer() as chat:
        home = Home(tmp_path, TOOLROUTER_ROUTE_LLM_URL=chat.url)
        routed = home.run("route", "add these numbers", "--strategy", "llm")
        assert chat.requests, "the model was not asked"
    assert ok(routed).startswith("strategy: llm\n"), routed.stdout
    assert routed.stderr == ""
