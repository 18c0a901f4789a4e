"""``uniqueItems`` checked in time linear in the array.

jsonschema compares the items of an array of objects each with each: an agent's array of
a few thousand small objects held the API's CPU for over a minute. Here each item is
written once as canonical JSON, numbers as JSON Schema compares them (``1`` equals
``1.0``; ``true`` is not ``1``), and the texts go into a set.

jsonschema's ``uniqueItems`` calls ``uniq`` from the module of its keywords and offers no
other hook, so ``install`` puts this one there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jsonschema import _keywords


def uniq(container: Iterable[Any]) -> bool:
    """Whether no two items of ``container`` are equal as JSON Schema compares them."""
    seen: set[str] = set()
    for item in container:
        text = json.dumps(_comparable(item), sort_keys=True, separators=(",", ":"))
        if text in seen:
            return False
        seen.add(text)
    return True


def _comparable(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 1.0 and 1 are one number to JSON Schema
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(item) for item in value]
    return value


def install() -> None:
    """Make jsonschema's ``uniqueItems`` use ``uniq`` (idempotent)."""
    _keywords.uniq = uniq
