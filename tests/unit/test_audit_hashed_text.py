"""What an audit row's hash covers is the canonical JSON of its fields, whatever they hold.

``hashed_text`` writes the usual shape of a row out directly; every row a chain has ever
held must hash to the text ``canonical_json`` gives, or rows written before would no longer
verify.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.audit.log import _HASHED_FIELDS, hashed_text
from router.canonical import canonical_json

TEXT = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF))
FIELD = st.none() | TEXT
INTEGER = st.integers(min_value=-(2**70), max_value=2**70)
OTHER = st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | st.lists(INTEGER)


def canonical(row: dict[str, Any]) -> str:
    return canonical_json({key: row[key] for key in _HASHED_FIELDS})


def row_of(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_HASHED_FIELDS)
    row.update(seq=1, at=1_700_000_000_000, event="accepted", actor="agent", hash="h")
    row.update(fields)
    return row


@settings(max_examples=400, deadline=None)
@given(
    texts=st.fixed_dictionaries(
        {k: FIELD for k in ("tool", "event", "call_id", "request_id", "actor", "detail")}
    ),
    seq=INTEGER,
    at=INTEGER,
    prev_hash=TEXT,
)
def test_the_usual_row_hashes_the_canonical_text(
    texts: dict[str, Any], seq: int, at: int, prev_hash: str
) -> None:
    row = row_of(seq=seq, at=at, prev_hash=prev_hash, **texts)
    assert hashed_text(row) == canonical(row)


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(_HASHED_FIELDS), value=OTHER)
def test_a_field_of_any_other_type_still_hashes_the_canonical_text(field: str, value: Any) -> None:
    row = row_of(**{field: value})
    assert hashed_text(row) == canonical(row)


@pytest.mark.parametrize(
    "text",
    ["\x00", "\ud800", "é", "💥", '"', "\\", "\u2028", "\x7f", "a\nb"],
    ids=repr,
)
def test_characters_json_escapes(text: str) -> None:
    row = row_of(tool=text, detail=text, prev_hash=text)
    assert hashed_text(row) == canonical(row)
    assert hashed_text(row).isascii()


def test_the_hash_itself_is_not_covered() -> None:
    assert hashed_text(row_of(hash="a")) == hashed_text(row_of(hash="b"))
