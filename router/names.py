"""Names callers send (tools, fields, ids), made safe to echo back and to store."""

from __future__ import annotations

import json
import urllib.parse

# Unknown names are echoed back and audited, but not at any length.
MAX_ECHOED_NAME = 128
# A key's name is its identity in the audit log and every listing.
KEY_NAME_MAX = 128
KEY_NAME_RULE = f"key name must be 1-{KEY_NAME_MAX} printable characters, none blank at either end"
# Printable, yet shown as nothing: Hangul fillers and the blank braille pattern.
_BLANK_LOOKING = frozenset("\u115f\u1160\u2800\u3164\uffa0")


def is_key_name(name: str) -> bool:
    """Whether ``name`` may name a key: one that reads as another (``agentA `` beside
    ``agentA``) would make two identities look like one in the audit log."""
    return (
        0 < len(name) <= KEY_NAME_MAX
        and name.isprintable()
        and not {name[0], name[-1]} & (_BLANK_LOOKING | {" "})
    )


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
