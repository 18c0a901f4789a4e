"""What is wrong with a JSON text is said in our words, once: not Python's advice to its
programmer (``utf-8-sig``, ``sys.set_int_max_str_digits``), not "at at"."""

from __future__ import annotations

import json

import pytest

from router.json_input import json_problem, malformed
from router.ui.edit import parse_args


def problem_of(text: str) -> str:
    with pytest.raises(ValueError) as raised:
        json.loads(text)
    return json_problem(raised.value)


def test_a_control_character_is_placed_once() -> None:
    assert problem_of('{"a": "x\x01"}') == "Invalid control character at line 1 column 9"


def test_a_byte_order_mark_is_named_not_a_codec() -> None:
    said = problem_of('\ufeff{"a": 1}')
    assert said == "starts with a byte order mark (U+FEFF), which JSON sent must not hold"
    with pytest.raises(json.JSONDecodeError) as raised:
        json.loads("\ufeff{}")  # Python's own message, whatever its wording
    assert "utf-8-sig" not in str(malformed(raised.value))


def test_an_integer_too_long_is_told_in_digits() -> None:
    said = problem_of('{"n": ' + "9" * 5000 + "}")
    assert said.startswith("an integer of more than ") and "set_int_max_str_digits" not in said


def test_the_inbox_edit_form_says_the_same() -> None:
    said = parse_args('{"n": ' + "9" * 5000 + "}", 1_000_000)
    assert isinstance(said, str) and "set_int_max_str_digits" not in said, said
    assert said.startswith("That is not valid JSON: an integer of more than "), said
