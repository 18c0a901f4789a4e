"""The pure halves of MCP content: an imported tool's blocks into their wire form (the
worker), the call result's ``content`` field, and the blocks back into an MCP answer
(toolrouter's own MCP server)."""

from __future__ import annotations

import json
from typing import Any

from mcp import types

from router.mcp.tools import mcp_blocks, render
from router.messaging.completions import MAX_RESULT_BYTES, completion_message, parse_completion
from router.results import CallResult
from router.trust.keyring import KeyRing
from workers.handlers import Outcome
from workers.handlers.mcp import kept_content, wire_blocks

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
AUDIO = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
TEXT_RESOURCE = {
    "type": "resource",
    "resource": {"uri": "demo://text/1", "mimeType": "text/plain", "text": "hello"},
}
BLOB_RESOURCE = {"type": "resource", "resource": {"uri": "demo://blob/1", "blob": "aGk="}}
LINK = {
    "type": "resource_link",
    "uri": "demo://blob/1",
    "name": "Blob 1",
    "description": "a blob",
    "mimeType": "text/plain",
}
META_TEXT = {"type": "text", "text": "m", "_meta": {"k": 1}}
ANNOTATED = {
    "type": "text",
    "text": "done",
    "annotations": {"audience": ["user", "assistant"], "priority": 0.7},
}
EVERY_KIND: list[dict[str, Any]] = [
    {"type": "text", "text": "look:"},
    IMAGE,
    AUDIO,
    TEXT_RESOURCE,
    BLOB_RESOURCE,
    LINK,
]


def sdk_blocks(blocks: list[dict[str, Any]]) -> list[types.ContentBlock]:
    """Blocks as the SDK's client hands them to the worker: parsed from the wire."""
    return types.CallToolResult.model_validate({"content": blocks}).content


def result_with(content: list[dict[str, Any]] | None, value: Any = "look:") -> CallResult:
    return CallResult(
        status="succeeded", tool="media.chart", call_id="call_1", value=value, content=content
    )


# -- the worker: blocks to their wire form -------------------------------------------------


def test_every_kind_of_block_keeps_its_wire_form() -> None:
    assert wire_blocks(sdk_blocks([*EVERY_KIND, ANNOTATED])) == [*EVERY_KIND, ANNOTATED]


def test_blocks_meta_and_annotations_keep_their_wire_names() -> None:
    block = {**IMAGE, "_meta": {"source": "camera"}, "annotations": {"lastModified": "x"}}
    assert wire_blocks(sdk_blocks([block])) == [block]


def test_content_is_kept_exactly_when_the_value_cannot_carry_it() -> None:
    plain = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert kept_content(sdk_blocks(plain)) is None
    assert kept_content([]) is None
    for extra in (IMAGE, AUDIO, TEXT_RESOURCE, BLOB_RESOURCE, LINK, ANNOTATED, META_TEXT):
        assert kept_content(sdk_blocks([*plain, extra])) == [*plain, extra]


def test_an_outcome_stores_content_beside_the_value_and_checks_its_depth() -> None:
    outcome = Outcome.of_value({"w": 1}, max_nesting=64, content=[IMAGE])
    assert outcome.ok and outcome.value_json == '{"w":1}'
    assert outcome.content_json is not None and json.loads(outcome.content_json) == [IMAGE]
    assert Outcome.of_value("x", max_nesting=64).content_json is None

    deep: Any = "bottom"
    for _ in range(70):
        deep = [deep]
    too_deep = Outcome.of_value("x", max_nesting=64, content=[{**IMAGE, "_meta": {"d": deep}}])
    assert (too_deep.ok, too_deep.error_type) == (False, "ResultTooDeep")
    assert too_deep.value_json is None and too_deep.content_json is None


# -- the call result ------------------------------------------------------------------------


def test_content_is_on_the_wire_only_beside_a_value() -> None:
    assert result_with([IMAGE]).to_dict() == {
        "ok": True,
        "call_id": "call_1",
        "tool": "media.chart",
        "status": "succeeded",
        "value": "look:",
        "content": [IMAGE],
    }
    assert "content" not in result_with(None).to_dict()
    failed = CallResult(status="failed", tool="t", call_id="c", error="no", content=[IMAGE])
    assert "content" not in failed.to_dict()


def test_the_python_client_reads_content_back() -> None:
    assert CallResult.from_dict(result_with(EVERY_KIND).to_dict()) == result_with(EVERY_KIND)
    odd = {**result_with(None).to_dict(), "content": "not blocks"}
    assert CallResult.from_dict(odd).content is None


def test_content_rides_the_completion_notice_only_when_all_of_it_fits() -> None:
    keyring = KeyRing(b"k" * 32)
    small = result_with([IMAGE])
    parsed = parse_completion(completion_message("call_1", small, keyring).encode(), keyring)
    assert parsed == ("call_1", small)
    big = result_with([{**AUDIO, "data": "A" * MAX_RESULT_BYTES}], value="")
    assert completion_message("call_1", big, keyring) == "call_1"


# -- toolrouter's MCP server: blocks back into an answer -----------------------------------


def test_an_answer_with_content_is_its_blocks_and_the_call_result_without_them() -> None:
    answer = render(result_with(EVERY_KIND))
    assert answer.is_error is False
    assert wire_blocks(answer.content) == EVERY_KIND
    assert answer.structured_content == {
        "ok": True,
        "call_id": "call_1",
        "tool": "media.chart",
        "status": "succeeded",
        "value": "look:",
    }
    wire = answer.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["content"] == EVERY_KIND


def test_an_answer_without_content_is_the_value_as_json_as_before() -> None:
    answer = render(result_with(None, value={"w": 1}))
    assert [(block.type, getattr(block, "text", None)) for block in answer.content] == [
        ("text", '{"w": 1}')
    ]
    assert answer.structured_content is not None
    assert answer.structured_content["value"] == {"w": 1}


def test_blocks_no_mcp_client_would_take_stay_in_the_structured_content() -> None:
    odd = [{"type": "hologram", "data": "x"}]
    assert mcp_blocks(odd) is None
    answer = render(result_with(odd))
    assert [block.type for block in answer.content] == ["text"]
    assert answer.structured_content is not None
    assert answer.structured_content["content"] == odd


def test_a_lone_surrogate_in_a_block_cannot_break_the_answer() -> None:
    answer = render(result_with([{**ANNOTATED, "text": "bad \udc80 text"}]))
    (block,) = answer.content
    assert isinstance(block, types.TextContent)
    block.text.encode("utf-8")
    assert block.text == "bad ? text"


def test_a_string_value_is_its_own_text_and_anything_else_is_json() -> None:
    def text(value: Any) -> str:
        answer = render(CallResult(status="succeeded", tool="t", call_id="call_1", value=value))
        (block,) = answer.content
        assert isinstance(block, types.TextContent)
        return block.text

    assert text('say "hi"') == 'say "hi"'
    assert text("") == ""
    assert text({"a": "é"}) == '{"a": "é"}'
    assert text(["x"]) == '["x"]'
    assert text(None) == "null"
