"""A batch body read an entry at a time says what ``json.loads`` says of it, value for value
and error for error; its entries are checked in chunks bounded by count and by size."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.params import FULL
from bench.toolrouter_runs import noop_batch
from router import json_input
from router.api import batch_json
from router.api.batch_json import json_calls, values_at_most, walk_calls
from router.api.bodies import object_body
from router.api.routes_batches import ndjson_calls
from router.client.api_requests import Api
from router.dispatch.batch_entries import Malformed, Unread, chunks, parse_call
from router.errors import BadRequest, PayloadTooLarge, RequestError
from router.settings import Settings

ALLOWED = frozenset({"calls", "idempotency_key"})
LIMIT = 10**6

SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab"\\,:{}[]\n é\U0001f600\x01'), max_size=8)
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)
ENTRY = VALUE | st.fixed_dictionaries({"tool": st.text(max_size=5), "args": VALUE})
BODY = st.fixed_dictionaries(
    {"calls": st.lists(ENTRY, max_size=6)}, optional={"idempotency_key": VALUE}
)
# What a client might get wrong: a character lost, one too many, the text cut short.
NOISE = st.sampled_from(list('{}[],:" 1a\\-etn'))


@contextmanager
def small_windows() -> Iterator[None]:
    """Windows of one character, doubling: every value is read across many edges."""
    with (
        mock.patch.object(batch_json, "FIRST_WINDOW", 1),
        mock.patch.object(batch_json, "GROWTH", 2),
        mock.patch.object(batch_json, "UTF8_BLOCK", 3),  # an error's column counted in blocks
    ):
        yield


def read_whole(raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", object_body(raw, limit=LIMIT, allowed=ALLOWED)
    except RequestError as exc:
        return type(exc).__name__, str(exc)


def read_walking(raw: bytes, *, entry_limit: int = LIMIT) -> tuple[str, Any]:
    try:
        body = walk_calls(raw, allowed=ALLOWED, max_calls=100, entry_limit=entry_limit)
    except RequestError as exc:
        return type(exc).__name__, str(exc)
    calls = body.get("calls")
    if isinstance(calls, list):
        body["calls"] = [json.loads(item.text) for item in calls]
    return "ok", body


@settings(max_examples=600, deadline=None)
@given(body=BODY, indent=st.sampled_from([None, 1]), data=st.data())
def test_walking_reads_what_json_loads_reads(
    body: dict[str, Any], indent: int | None, data: Any
) -> None:
    text = json.dumps(body, indent=indent, ensure_ascii=data.draw(st.booleans()))
    change = data.draw(st.sampled_from(["none", "drop", "add", "cut"]))
    at = data.draw(st.integers(min_value=0, max_value=len(text)))
    if change == "drop":
        text = text[:at] + text[at + 1 :]
    elif change == "add":
        text = text[:at] + data.draw(NOISE) + text[at:]
    elif change == "cut":
        text = text[:at]
    raw = text.encode("utf-8")
    whole = read_whole(raw)
    if whole[0] == "BadRequest" and not text.lstrip().startswith("{"):
        # Not an object: the walk says so without reading on (json.loads may find an error).
        assert read_walking(raw)[0] == "BadRequest"
        return
    with small_windows():
        assert read_walking(raw) == whole


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("a{é€\U0001f600"), max_size=12),
    bad=st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80"]),
    at=st.integers(min_value=0, max_value=40),
    block=st.integers(min_value=1, max_value=5),
)
def test_utf8_checked_in_blocks_is_refused_at_the_byte_decoding_whole_names(
    text: str, bad: bytes, at: int, block: int
) -> None:
    """A character cut between two blocks is whole, and a bad byte is named where a decoder
    of the whole body names it, whatever the blocks."""
    raw = text.encode("utf-8")
    raw = raw[: min(at, len(raw))] + bad + raw[min(at, len(raw)) :]
    with pytest.raises(BadRequest) as whole:
        json_input.text_of(b"{" + raw)
    with mock.patch.object(json_input, "UTF8_BLOCK", block), pytest.raises(BadRequest) as blocks:
        json_input.check_utf8(b"{" + raw)
    assert str(blocks.value) == str(whole.value)
    with mock.patch.object(json_input, "UTF8_BLOCK", block):
        json_input.check_utf8(b"{" + text.encode("utf-8"))


def test_a_value_longer_than_a_call_is_refused_by_its_place() -> None:
    entry = json.dumps({"tool": "t", "args": {"x": [[]] * 40}})
    body = f'{{"calls": [{{"tool": "t"}}, {entry}, {{"tool": "u"}}]}}'.encode()
    with small_windows():
        assert read_walking(body, entry_limit=len(entry)) == (
            "ok",
            {"calls": [{"tool": "t"}, json.loads(entry), {"tool": "u"}]},
        )
        assert read_walking(body, entry_limit=len(entry) - 1) == (
            "PayloadTooLarge",
            f"call 1 is written in more than {len(entry) - 1} bytes",
        )
        key = b'{"idempotency_key": "' + b"k" * 200 + b'", "calls": []}'
        assert read_walking(key, entry_limit=100) == (
            "PayloadTooLarge",
            "idempotency_key is written in more than 100 bytes",
        )


@pytest.mark.parametrize(
    ("body", "error"),
    [
        # A number ending at a window's edge is read on, not cut.
        (b'{"calls": [12345678901234567890, 1]}', None),
        (b'{"calls": [{"tool": "t" "args": {}}, {"tool": "u"}]}', "Expecting ',' delimiter"),
        (b'{"calls": [{"tool": "t"}, tru, {"tool": "u"}]}', "Expecting value"),
        (b'{"calls": [{"tool": "t\\q"}, {"tool": "u"}]}', "Invalid \\escape"),
        (b'{"calls": [{"tool": "t"}, NaN]}', "NaN is not valid JSON"),
        (b'{"calls": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too deeply"),
        # Cut short, its digits read as an integer Python refuses to make; whole, a float.
        (b'{"calls": [{"tool": "t", "args": {"v": ' + b"1" * 9000 + b".5}}, 1]}", None),
    ],
    ids=[
        "long number",
        "missing comma",
        "cut literal",
        "bad escape",
        "NaN",
        "deep",
        "float past the digit limit",
    ],
)
def test_an_error_inside_a_window_is_json_s_own(body: bytes, error: str | None) -> None:
    with small_windows():
        walked = read_walking(body, entry_limit=len(body))
    if error is None:
        assert walked == read_whole(body)
    else:
        assert walked[0] == "BadRequest" and error in walked[1], walked
        if "nested" not in error:
            assert walked == read_whole(body)


def test_an_error_at_the_end_of_a_long_line_is_placed_without_copying_the_body() -> None:
    entry = b'{"tool": "t", "args": {"x": "' + "é".encode() * 4000 + b'"}}'
    body = b'{"calls": [' + b", ".join([entry] * 1000) + b'], "x": tru}'
    tracemalloc.start()
    try:
        with pytest.raises(BadRequest) as walked:
            walk_calls(body, allowed=ALLOWED, max_calls=1000, entry_limit=len(entry))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    with pytest.raises(BadRequest) as whole:
        object_body(body, limit=len(body), allowed=ALLOWED)
    assert str(walked.value) == str(whole.value)
    # The calls' text is held (about the body); a copy of the line would double it.
    assert peak < 1.5 * len(body), (peak, len(body))


def test_an_unknown_field_or_too_many_calls_is_refused_before_reading_on() -> None:
    assert read_walking(b'{"cals": [' + b"[]," * 10 + b"[]]}") == (
        "BadRequest",
        "unknown field: cals",
    )
    body = b'{"calls": [' + b",".join([b"{}"] * 101) + b"]}"
    assert read_walking(body) == ("PayloadTooLarge", "too many calls: over the limit of 100")


def test_ndjson_lines_are_kept_as_text_and_a_long_one_is_rejected_at_its_index() -> None:
    raw = b'{"tool": "t"}\n\n' + b'{"tool": "' + b"x" * 100 + b'"}\n{"tool"\n'
    items = ndjson_calls(raw, line_limit=50, max_calls=10)
    assert items == [
        Unread(b'{"tool": "t"}'),
        Malformed("call is 112 bytes, over the limit of 50"),
        Unread(b'{"tool"'),
    ]
    assert parse_call(items[0]) == ("t", {}, None)
    assert parse_call(items[2]) == "malformed call: Expecting ':' delimiter at line 1 column 8"
    with pytest.raises(PayloadTooLarge):
        ndjson_calls(b"{}\n{}\n{}\n", line_limit=50, max_calls=2)


def test_chunks_hold_so_many_calls_and_so_many_bytes_of_unread_text() -> None:
    items: list[object] = [Unread(b"x" * 40), Unread(b"x" * 40), {"tool": "t"}, Unread(b"x" * 90)]
    items += [Unread(b"x" * 10)] * 3
    assert [list(r) for r in chunks(items, 3, 100)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(r) for r in chunks(items, 3, 80)] == [[0, 1, 2], [3], [4, 5, 6]]
    assert [list(r) for r in chunks(items, 2, 1000)] == [[0, 1], [2, 3], [4, 5], [6]]
    assert list(chunks([], 3, 100)) == []
    larger = [Unread(b"x" * 200), Unread(b"x")]  # larger than a chunk: a chunk of its own
    assert [list(r) for r in chunks(larger, 3, 100)] == [[0], [1]]


def test_an_unread_entry_that_is_not_json_is_rejected_with_json_s_words() -> None:
    with pytest.raises(BadRequest):
        object_body(b"\xff", limit=10, allowed=ALLOWED)
    assert parse_call(Unread(b"\xff")) == "malformed call: not valid UTF-8 (byte 0)"


@settings(max_examples=200, deadline=None)
@given(body=BODY)
def test_a_body_holds_no_more_values_than_counted(body: dict[str, Any]) -> None:
    def count(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + sum(1 + count(item) for item in value.values())
        if isinstance(value, list):
            return 1 + sum(count(item) for item in value)
        return 1

    # Strings may hold the characters counted too: the bound is never under the truth.
    assert values_at_most(json.dumps(body).encode()) >= count(body)
    assert values_at_most(b"[" * 300 + b"]" * 300) == 301


def test_a_body_of_few_commas_but_many_values_is_walked() -> None:
    chain = b"[" * 50 + b"]" * 50
    body = b'{"calls": [' + chain + b"," + chain + b"]}"
    with mock.patch.object(batch_json, "walk_calls", return_value={"calls": []}) as walk:
        json_calls(body, limit=LIMIT, allowed=ALLOWED, max_calls=10, entry_limit=LIMIT)
    walk.assert_called_once()


@pytest.mark.parametrize("constant", ["-Infinity", "Infinity", "NaN", "true", "1.5e-7"])
def test_a_word_cut_by_a_window_s_edge_reads_as_it_does_whole(constant: str) -> None:
    # Real windows: the word placed across the first edge at every offset.
    for at in range(batch_json.FIRST_WINDOW - 12, batch_json.FIRST_WINDOW + 2):
        head = '{"tool": "t", "args": {"x": "'
        call = head + "a" * (at - len(head) - len('", "y": ')) + f'", "y": {constant}}}}}'
        assert call.index(constant) == at
        body = f'{{"calls": [{call}, {{"tool": "u"}}]}}'.encode()
        assert read_walking(body) == read_whole(body), at


def test_a_byte_order_mark_is_refused_in_one_message_whichever_way_read() -> None:
    body = b"\xef\xbb\xbf" + b'{"calls": [{"tool": "t"}]}'
    assert read_walking(body) == read_whole(body)
    assert "starts with a byte order mark" in read_whole(body)[1]


def test_the_benchmarks_batch_is_read_whole_at_the_default_limit() -> None:
    # The bench measures the common path: its body must not fall to the entry-by-entry walk.
    body = (
        Api("http://127.0.0.1:8000", "trk_bench", 60.0)
        .batch(noop_batch(FULL.batch_calls), None, None)
        .body
    )
    assert body is not None
    assert values_at_most(body) <= Settings.model_fields["max_batch_calls"].default
