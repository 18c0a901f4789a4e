"""Arguments shown to approvers (the inbox's edit page, notifications) cannot display as
something other than what they hold: characters that hide or reorder text are escaped."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from router.canonical import shown_plainly
from router.notify.content import SUMMARY_CHARS, shortened, summarize
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


def test_a_cut_summary_never_ends_inside_an_escape() -> None:
    for pad in range(300):
        text = summarize({"to": "x" * pad + "\u202e" + "y" * 300}, Redactor())
        assert len(text) <= SUMMARY_CHARS
        assert re.search(r"(?<!\\)(\\\\)*\\(u[0-9a-f]{0,3})?…$", text) is None, text
        assert "\\u202e" in text or "\\u" not in text


@given(st.text(alphabet="\\u0a", max_size=40), st.integers(min_value=2, max_value=40))
def test_a_cut_keeps_the_start_of_the_text_and_no_half_escape(text: str, limit: int) -> None:
    cut = shortened(text, limit)
    assert len(cut) <= limit
    if cut != text:
        kept = cut.removesuffix("…")
        assert text.startswith(kept)
        assert not ends_inside_an_escape(kept), cut


def ends_inside_an_escape(text: str) -> bool:
    """Read as JSON's escapes, ``text`` stops inside one (``\\``, ``\\u20``)."""
    at = 0
    while at < len(text):
        if text[at] != "\\":
            at += 1
        elif at + 1 == len(text):
            return True
        elif text[at + 1] == "u":
            hex_digits = text[at + 2 : at + 6]
            if len(hex_digits) < 4 and all(c in "0123456789abcdefABCDEF" for c in hex_digits):
                return True
            at += 6
        else:
            at += 2
    return False
