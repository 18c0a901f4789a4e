"""Names callers send (tools, fields, ids), made safe to echo back and to store."""

from __future__ import annotations

import json
import unicodedata
import urllib.parse

# Unknown names are echoed back and audited, but not at any length.
MAX_ECHOED_NAME = 128
# A key's name is its identity in the audit log and every listing.
KEY_NAME_MAX = 128
KEY_NAME_RULE = f"key name must be 1-{KEY_NAME_MAX} printable characters, none blank at either end"
ROLE_NAME_MAX = 64
ROLE_NAME_RULE = (
    f"role must be 1-{ROLE_NAME_MAX} printable characters, none blank at either end, no comma"
)
# Scripts whose letters look alike: "alice" with a Cyrillic \u0430 first reads as "alice".
_LOOK_ALIKE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK"})
LOOK_ALIKE_RULE = "mixes Latin, Cyrillic or Greek letters"
# Printable, yet shown as nothing: a space, the grapheme joiner, Hangul and Khmer fillers,
# and the blank braille pattern.
_SHOWN_AS_NOTHING = frozenset(" \u034f\u115f\u1160\u17b4\u17b5\u2800\u3164\uffa0")


def _is_variation_selector(char: str) -> bool:
    return (
        "\ufe00" <= char <= "\ufe0f"
        or "\U000e0100" <= char <= "\U000e01ef"
        or "\u180b" <= char <= "\u180f"  # Mongolian's
    )


def _blank_at_an_end(name: str) -> bool:
    first, last = name[0], name[-1]
    if first in _SHOWN_AS_NOTHING or _is_variation_selector(first) or last in _SHOWN_AS_NOTHING:
        return True
    if _is_variation_selector(last):
        # It shows as the variant of the character before it (an emoji, an ideograph, a
        # Mongolian letter); after a blank or an ASCII character, as nothing.
        before = name[-2] if len(name) > 1 else " "
        return before in _SHOWN_AS_NOTHING or before.isascii()
    return False


def is_key_name(name: str) -> bool:
    """Whether ``name`` may name a key: one that reads as another (``agentA `` beside
    ``agentA``) would make two identities look like one in the audit log."""
    return 0 < len(name) <= KEY_NAME_MAX and name.isprintable() and not _blank_at_an_end(name)


def is_role_name(name: str) -> bool:
    """Whether ``name`` may name a role: as a key's name, and without a comma (listings
    join a key's roles with commas, so ``a,operator`` would read as two)."""
    return is_key_name(name) and len(name) <= ROLE_NAME_MAX and "," not in name


def mixes_look_alike_letters(name: str) -> bool:
    """Whether ``name`` mixes Latin, Cyrillic and Greek letters, which look alike: such a
    name reads as another. The whole name counts, whatever separates its letters (a hyphen,
    a digit, a joiner that shows nothing): "a-team" with a Cyrillic first letter reads as
    "a-team" all the same."""
    if name.isascii():
        return False
    scripts = {unicodedata.name(char, "").partition(" ")[0] for char in name if char.isalpha()}
    return len(scripts & _LOOK_ALIKE_SCRIPTS) > 1


# The micro sign, which NFKC turns into the Greek mu: it reads as itself in a unit (`µs`).
_MICRO = "\u00b5"
# Dashes that show as `-`: hyphens, the figure and en dashes, the minus signs.
_DASHES = frozenset("\u02d7\u2010\u2011\u2012\u2013\u2043\u2212\ufe58\ufe63\uff0d")
ONE_WAY_RULE = (
    "must be written one way: no decomposed accents, no compatibility forms (fullwidth,"
    " mathematical, circled or superscript letters, ligatures, Roman numerals), no dash but -"
)


def is_written_one_way(name: str) -> bool:
    """Whether ``name`` has no twin written with other characters that show the same: it is
    its own compatibility normal form (NFKC: accents composed, no fullwidth, mathematical
    or other variant of a letter), the micro sign aside, and ``-`` is its only dash."""
    if name.isascii():
        return True
    if not _DASHES.isdisjoint(name):
        return False
    plain = name.replace(_MICRO, "")
    return unicodedata.normalize("NFKC", plain) == plain


def echo_name(name: object) -> str:
    """A caller-supplied name made safe to echo and to store: printable, and not too long."""
    text = name if isinstance(name, str) else json.dumps(name, default=repr)
    if not text.isprintable():
        text = json.dumps(text)[1:-1]  # escapes control characters and lone surrogates
    return text if len(text) <= MAX_ECHOED_NAME else text[:MAX_ECHOED_NAME] + "…"


def path_segment(value: str) -> str:
    """An id as one path segment of a URL: a ``/`` or ``?`` in it cannot reach another
    route (the client's requests and the command line's)."""
    return urllib.parse.quote(value, safe="")
