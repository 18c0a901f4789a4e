"""A tool's schema patterns are matched by RE2, in time linear in the arguments: a
pattern that backtracks in Python's ``re`` cannot hold the API, and one that only
backtracking can match is refused when its tool loads."""

from __future__ import annotations

from typing import Any

import pytest

from router.errors import ConfigError
from router.tools.config import ToolSpec
from router.tools.registry import build_tool
from router.tools.schemas import schema_problem

# Each backtracks exponentially in Python's `re` on a run of `a`s that fails at its end.
CATASTROPHIC = "^(a|aa)+$"
# Long enough that `re` would not finish within any test run.
LONG_RUN = "a" * 100_000 + "b"


def spec(input_schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec.model_validate(
        {"name": "t", "handler": "router.tools.demo_tools:add", "input_schema": input_schema}
    )


def test_a_backtracking_pattern_meets_a_long_argument_and_answers() -> None:
    tool = build_tool(
        spec({"type": "object", "properties": {"q": {"type": "string", "pattern": CATASTROPHIC}}}),
        file="t.yaml",
    )
    assert tool.argument_errors({"q": "aaaa"}) is None
    assert tool.argument_errors({"q": LONG_RUN}) == 'q: must satisfy pattern "^(a|aa)+$"'


def test_a_property_name_meets_pattern_and_additional_properties_in_linear_time() -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }
    tool = build_tool(spec(schema), file="t.yaml")
    assert tool.argument_errors({"aa": 1}) is None
    assert tool.argument_errors({LONG_RUN: 1}) is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "(?=a)b"},
        {"type": "object", "patternProperties": {"(a)\\1": {}}},
        {"type": "object", "properties": {"q": {"anyOf": [{"pattern": "x(?!y)"}]}}},
        # A property, or a definition, may bear any name: a keyword's included.
        {"type": "object", "properties": {"enum": {"type": "string", "pattern": "(?=a)b"}}},
        {"$defs": {"default": {"pattern": "(?=a)b"}}, "$ref": "#/$defs/default"},
    ],
)
def test_a_pattern_only_backtracking_matches_is_refused_when_the_tool_loads(
    schema: dict[str, Any],
) -> None:
    problem = schema_problem(schema, None)
    assert problem is not None and "cannot be matched in linear time" in problem
    with pytest.raises(ConfigError, match="invalid JSON Schema: pattern"):
        build_tool(spec(schema), file="t.yaml")


def test_a_pattern_key_inside_data_or_naming_a_property_is_no_pattern() -> None:
    schema = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "default": "(?=a)"}},
        "examples": [{"pattern": "(?=a)"}],
        "enum": [{"pattern": "(?<=b)"}],
    }
    assert schema_problem(schema, None) is None


def test_a_pattern_reached_through_a_ref_into_data_cannot_check_and_says_so() -> None:
    """The load-time check reads no data; the engine then refuses the pattern, and the
    arguments are refused for the schema's fault, not answered with an error of ours."""
    schema = {"$ref": "#/default", "default": {"type": "string", "pattern": "(?=a)b"}}
    tool = build_tool(spec(schema), file="t.yaml")
    assert tool.argument_errors("ab") == (
        "cannot be checked: the tool's schema has a pattern only backtracking matches"
    )
