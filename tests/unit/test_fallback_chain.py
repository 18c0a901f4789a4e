"""The chain a failed call falls back along, as the worker walks it and a dry run explains
it: each tool once, never the tool itself, a gated one or one no longer configured."""

from __future__ import annotations

from router.messaging.policies import fallback_chain
from router.tools.config import parse_config
from router.tools.registry import ToolRegistry

CONFIG = """
tools:
  - {name: primary, handler: "tests.fixture_tools:echo", risk: low,
     fallbacks: [backup, backup, other]}
  - {name: backup, handler: "tests.fixture_tools:echo", risk: low}
  - {name: other, handler: "tests.fixture_tools:echo", risk: low}
  - {name: guarded, handler: "tests.fixture_tools:echo", risk: high}
"""


def registry() -> ToolRegistry:
    return ToolRegistry.from_config(parse_config(CONFIG, file="t.yaml", env={}))


def names(chain: list[object]) -> list[str]:
    return [tool.name for tool in chain]  # type: ignore[attr-defined]


def test_a_tool_s_fallbacks_come_each_once() -> None:
    tools = registry()
    primary = tools.get("primary")
    assert primary is not None
    assert names(fallback_chain(tools, primary, None)) == ["backup", "other"]


def test_a_stored_chain_wins_and_drops_the_tool_a_gated_one_and_one_since_removed() -> None:
    """A capability's chain is stored with the call: the config may have changed since."""
    tools = registry()
    primary = tools.get("primary")
    assert primary is not None
    chain = ["other", "retired", "primary", "guarded", "other", "backup"]
    assert names(fallback_chain(tools, primary, chain)) == ["other", "backup"]
