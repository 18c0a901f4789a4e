"""What agents and MCP servers send is checked in bounded time and space, and always gets
an answer: an array's items are told unique in linear time, a schema that loops or a
number too large to divide is refused as such, never a crash, and a tool's description is
embedded by its start (``router.tools.schema_unique``, ``registry``, ``semantic``)."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import given
from jsonschema import _utils

from router.tools.config import ToolSpec
from router.tools.registry import build_tool
from router.tools.schema_unique import uniq
from router.tools.schemas import schema_problem
from router.tools.selection.semantic import EMBEDDED_CHARS, Embeddings

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5, -1.0]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner),
    max_leaves=6,
)


def tool(input_schema: dict[str, Any]) -> Any:
    spec = ToolSpec.model_validate(
        {"name": "t", "handler": "router.tools.demo_tools:add", "input_schema": input_schema}
    )
    return build_tool(spec, file="t.yaml")


@given(st.lists(JSON, max_size=6))
def test_unique_items_are_told_as_jsonschema_tells_them(items: list[Any]) -> None:
    assert uniq(items) == _utils.uniq(items)


def test_many_objects_are_told_unique_in_linear_time() -> None:
    """Compared each with each, 20,000 objects took jsonschema minutes."""
    tags = tool({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}})
    many = [{"x": n} for n in range(20_000)]
    assert tags.argument_errors({"tags": many}) is None
    assert tags.argument_errors({"tags": [*many, {"x": 7.0}]}) is not None
    assert tags.argument_errors({"tags": [1, True, [1], {"1": 1}]}) is None


def test_a_schema_that_refers_to_itself_without_end_refuses_the_arguments() -> None:
    looping = {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/x"}},
        "definitions": {"x": {"$ref": "#/definitions/x"}},
    }
    assert tool(looping).argument_errors({"a": 1}) == (
        "cannot be checked: the tool's schema refers to itself without end"
    )


def test_a_number_too_large_for_a_fractional_multiple_is_refused() -> None:
    money = tool({"type": "object", "properties": {"amount": {"multipleOf": 0.01}}})
    assert money.argument_errors({"amount": 10**400}) == (
        "arguments: a number too large to check against the tool's schema"
    )
    assert money.argument_errors({"amount": 12.5}) is None


def test_a_schema_nested_past_checking_is_refused_at_load() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(400):
        deep = {"type": "array", "items": deep}
    assert schema_problem({"type": "object", "properties": {"a": deep}}, None) == (
        "the schema nests too deeply to be checked"
    )


def test_a_description_of_megabytes_is_embedded_by_its_start() -> None:
    """The model pads a batch to its longest text: uncut, one tool's megabyte of
    description asked for tens of gigabytes for every tool's vector."""
    huge = "backup web search " + "x" * 10**6
    vectors = Embeddings().of(["add two numbers", huge])
    assert vectors.shape[0] == 2
    assert np.allclose(vectors[1], Embeddings().of([huge[:EMBEDDED_CHARS]])[0])
