"""Arguments shown to approvers (the inbox's edit page, notifications) cannot display as
something other than what they hold: characters that hide or reorder text are escaped."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from router.canonical import shown_plainly
from router.notify.content import summarize
from router.trust.redaction import Redactor
from router.ui.edit import pretty

# Right-to-left override, zero-width space and joiner, a bidi isolate, a tag character.
HIDDEN = ["\u202e", "\u200b", "\u200d", "\u2066", "\U000e0041"]
ARGS = {"to": "invoice\u202eexe.pdf", "memo": "pay\u200bnow", "note": "日本語 😀\n"}


def test_a_character_that_hides_or_reorders_text_is_shown_as_its_escape() -> None:
    for text in (pretty(ARGS), summarize(ARGS, Redactor())):
        assert not any(hidden in text for hidden in HIDDEN), text
        assert "\\u202e" in text and "\\u200b" in text
        # What prints plainly stays as written.
        assert "日本語 😀" in text


def test_the_edit_page_keeps_its_lines_and_parses_back_to_the_same_arguments() -> None:
    text = pretty(ARGS)
    assert text.splitlines()[0] == "{" and json.loads(text) == ARGS


@given(st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=4))
def test_escaping_never_changes_the_value(args: dict[str, str]) -> None:
    text = shown_plainly(json.dumps(args, indent=2, ensure_ascii=False))
    assert json.loads(text) == args
    assert all(c.isprintable() or c == "\n" for c in text)
