"""Tools' JSON Schema patterns, matched in time linear in the text (RE2), never by
backtracking.

A tool's schema comes from its config or from an MCP server, and an agent's arguments
meet its ``pattern``s (and, as property names, its ``patternProperties``). Matched by
Python's ``re``, a pattern such as ``^(a|aa)+$`` holds the process, and every request it
serves, for minutes on a few dozen characters. RE2 has no backtracking, so it refuses
what needs it (lookaround, backreferences): such a schema is refused when the tool loads.

jsonschema matches with ``re.search`` in the modules of its keywords and offers no other
engine, so ``install`` gives those modules this engine's ``search`` in ``re``'s place.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import re2
from jsonschema import _keywords, _legacy_keywords, _utils

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported once, as the tool's problem
# Values that are data, not schemas: a "pattern" key inside them is no pattern.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
# Keywords whose value maps names, which may be any word, to schemas.
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, options=_OPTIONS)


def search(pattern: str, text: str) -> Any:
    """``re.search``, in linear time: the pattern was checked when its tool loaded."""
    try:
        compiled = _compiled(pattern)
    except re2.error as exc:
        raise re.error(f"pattern cannot be matched in linear time: {exc}") from None
    return compiled.search(text)


def pattern_problem(schema: Any) -> str | None:
    """The first pattern of ``schema`` RE2 cannot match, named with why, or None."""
    for pattern in _patterns(schema):
        try:
            _compiled(pattern)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            return (
                f"pattern {pattern!r} cannot be matched in linear time ({reason}); "
                "lookaround and backreferences are not supported"
            )
    return None


def _patterns(schema: Any) -> Iterator[str]:
    if isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("pattern"), str):
        yield schema["pattern"]
    for keyword, value in schema.items():
        if keyword in _SCHEMA_MAPS and isinstance(value, dict):
            if keyword == "patternProperties":
                yield from (key for key in value if isinstance(key, str))
            for each in value.values():  # whatever its name: a property may be "enum"
                yield from _patterns(each)
        elif keyword not in _DATA_KEYWORDS:
            yield from _patterns(value)


def install() -> None:
    """Make jsonschema's keywords match with ``search`` (idempotent)."""
    linear = SimpleNamespace(search=search)
    for module in (_keywords, _legacy_keywords, _utils):
        module.re = linear
