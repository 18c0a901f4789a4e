"""Key names that read as another name are refused; names in any script, accented either
way, or ending in an emoji are not."""

from __future__ import annotations

import pytest

from router.names import (
    is_key_name,
    is_role_name,
    is_written_one_way,
    mixes_look_alike_letters,
)


@pytest.mark.parametrize(
    "name",
    [
        "alice ",
        " alice",
        "alice \u034f",  # a space, then the grapheme joiner, which shows nothing
        "alice\u3164\ufe0f",  # a Hangul filler, then a variation selector
        "alice\u2800\U000e0100",  # the blank braille pattern, then a variation selector
        "alice\ufe0f",  # a variation selector after a letter: no variant, nothing shown
        "\ufe0falice",
        "alice\u17b4",  # a Khmer filler
        "alice\u180b",  # a Mongolian variation selector after a Latin letter
    ],
)
def test_a_name_blank_at_an_end_is_refused(name: str) -> None:
    assert not is_key_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "alice",
        "José",
        "Jose\u0301",
        "bot\u2764\ufe0f",
        "\u2764\ufe0f",
        "bot\u203c\ufe0f",  # a double exclamation emoji
        "bot\u2139\ufe0f",  # the information emoji
        "\u845b\U000e0100",  # an ideograph's variant, as Japanese names use
        "\u1820\u180b",  # a Mongolian letter's variant form
        "ci-runner.2",
        "a",
    ],
)
def test_a_name_that_shows_all_it_holds_is_taken(name: str) -> None:
    assert is_key_name(name)


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("finance", True),
        ("trésorerie", True),
        ("", False),
        ("a,operator", False),  # listed as two roles
        ("agent\nadmin", False),
        ("operator\u200b", False),  # reads as "operator"
        (" operator", False),
        ("r" * 65, False),
    ],
)
def test_role_names_follow_the_rule_of_key_names_and_hold_no_comma(
    role: str, allowed: bool
) -> None:
    assert is_role_name(role) is allowed


@pytest.mark.parametrize(
    ("name", "mixed"),
    [
        ("\u0430lice", True),  # a Cyrillic \u0430, then Latin letters
        ("\u03bfperator", True),  # a Greek omicron
        ("ope\u0440ator", True),  # a Cyrillic \u0440 inside
        ("\u0430-team", True),  # whatever separates the letters
        ("\u04301dmin", True),
        ("\u0430\u034flice", True),  # the grapheme joiner shows nothing
        ("\u0430\ufe00lice", True),
        ("bot-\u0418\u0432\u0430\u043d", True),  # Latin and Cyrillic in one name
        ("latency-\u03bcs", True),  # the Greek mu; the micro sign is not Greek
        ("latency-\u00b5s", False),
        ("alice", False),
        ("\u0418\u0432\u0430\u043d-2", False),
        ("Jos\u00e9", False),
        ("Jose\u0301", False),
        ("\u0391\u0392\u0393", False),
        ("\u65e5\u672c\u8a9e-bot", False),  # other scripts beside Latin look like none
    ],
)
def test_a_name_mixing_latin_cyrillic_or_greek_letters_is_told_apart(
    name: str, mixed: bool
) -> None:
    assert mixes_look_alike_letters(name) is mixed


@pytest.mark.parametrize(
    ("name", "one_way"),
    [
        ("Jos\u00e9", True),
        ("Jose\u0301", False),  # shows as the composed name above
        ("\uff41lice", False),  # fullwidth
        ("\U0001d41alice", False),  # mathematical bold
        ("\uff76\uff80", False),  # halfwidth katakana
        ("agent\u2010a", False),  # a hyphen that is not -
        ("agent\u2013a", False),
        ("agent\u2212a", False),  # the minus sign
        ("\u2160van", False),  # the Roman numeral one
        ("\ufb01le-bot", False),  # a ligature
        ("\u017fam", False),  # the long s
        ("\u24d0dmin", False),  # circled
        ("\u1d43dmin", False),  # superscript
        ("a\u02d7b", False),  # the modifier letter minus
        ("\u65e5\u672c\u301cbot", True),  # the wave dash shows as no hyphen
        ("\u05d0\u05be\u05d1", True),  # the Hebrew maqaf sits high
        ("agent-a", True),
        ("latency-\u00b5s", True),  # the micro sign is no presentation form
        ("\u65e5\u672c\u8a9e-bot", True),
        ("bot\u2764\ufe0f", True),
    ],
)
def test_a_name_with_a_twin_written_otherwise_is_told_apart(name: str, one_way: bool) -> None:
    assert is_written_one_way(name) is one_way
