"""Builds the tool-selection set from the Berkeley Function Calling Leaderboard's data.

Run by hand (not in CI), with the ``bfcl-eval`` wheel or the folder it was unzipped into::

    pip download --no-deps bfcl-eval==2026.3.23 -d /tmp/pk
    python -m bench.tool_selection.build_dataset /tmp/pk/bfcl_eval-2026.3.23-py3-none-any.whl

It reads four categories of BFCL v4 (``simple_python``, ``multiple``, ``live_simple``,
``live_multiple``): each entry is a request (the last user message), the functions offered
with it, and its possible answers. It writes, next to this file:

- ``catalogue.json``: every function once, by name (the first description seen wins), with
  its parameters as an ``input_schema`` of property names and descriptions only;
- ``requests.json``: every entry whose answer is exactly one call, labelled with that call's
  function, and its source file and id.

Names that toolrouter would refuse get their other characters replaced with ``_``, in the
catalogue and in the labels alike. The data is Apache-2.0 (see ``SOURCES.md``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from router.tools.config import TOOL_NAME_RE

HERE = Path(__file__).resolve().parent
CATALOGUE = HERE / "catalogue.json"
REQUESTS = HERE / "requests.json"
CATEGORIES = ("simple_python", "multiple", "live_simple", "live_multiple")
# Above this size in all, parameter descriptions longer than LONG are left out.
MAX_BYTES = 3_000_000
LONG = 200
# Nested parameters kept to this depth, as deep as the lexical index reads them.
_DEPTH = 3
_BAD_CHAR = re.compile(r"[^A-Za-z0-9_.-]")


class Source:
    """The data files, from the wheel itself or from the folder it was unzipped into."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def lines(self, relative: str) -> Iterator[dict[str, Any]]:
        name = f"bfcl_eval/data/{relative}"
        if self._zip is not None:
            text = self._zip.read(name).decode("utf-8")
        else:
            text = (self.path / name).read_text(encoding="utf-8")
        for line in text.splitlines():
            if line.strip():
                yield json.loads(line)


def valid_name(name: str, taken: dict[str, str]) -> str:
    """``name`` as toolrouter accepts it; a replacement never lands on another tool's name."""
    if TOOL_NAME_RE.match(name):
        return name
    base = _BAD_CHAR.sub("_", name)[:60] or "tool"
    candidate, n = base, 1
    while candidate in taken.values():
        n += 1
        candidate = f"{base}_{n}"
    return candidate


def schema_of(parameters: Any, depth: int = _DEPTH) -> dict[str, Any]:
    """BFCL's parameters (``type: dict``) as a JSON schema with names and descriptions only."""
    schema: dict[str, Any] = {"type": "object"}
    if isinstance(parameters, dict):
        schema["properties"] = _properties(parameters.get("properties"), depth)
    return schema


def _properties(properties: Any, depth: int) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    if not isinstance(properties, dict):
        return kept
    for name, sub in properties.items():
        entry: dict[str, Any] = {}
        if isinstance(sub, dict):
            if isinstance(sub.get("description"), str) and sub["description"].strip():
                entry["description"] = sub["description"].strip()
            if depth > 1 and isinstance(sub.get("properties"), dict):
                entry["properties"] = _properties(sub["properties"], depth - 1)
            items = sub.get("items")
            if depth > 1 and isinstance(items, dict) and isinstance(items.get("properties"), dict):
                entry["items"] = {"properties": _properties(items["properties"], depth - 1)}
        kept[str(name)] = entry
    return kept


def last_user_message(question: list[Any]) -> str:
    messages = [m for turn in question for m in turn if isinstance(m, dict)]
    users = [m for m in messages if m.get("role") == "user"]
    return str((users or messages)[-1].get("content", "")).strip()


def build(source: Source) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tools: dict[str, dict[str, Any]] = {}
    renamed: dict[str, str] = {}
    requests: list[dict[str, Any]] = []
    for category in CATEGORIES:
        answers = {
            a["id"]: a["ground_truth"]
            for a in source.lines(f"possible_answer/BFCL_v4_{category}.json")
        }
        for entry in source.lines(f"BFCL_v4_{category}.json"):
            for function in entry["function"]:
                raw = str(function["name"])
                if raw not in renamed:
                    renamed[raw] = valid_name(raw, renamed)
                name = renamed[raw]
                tools.setdefault(
                    name,
                    {
                        "name": name,
                        "description": " ".join(str(function.get("description", "")).split()),
                        "input_schema": schema_of(function.get("parameters")),
                    },
                )
            truth = answers.get(entry["id"])
            if not truth or len(truth) != 1 or len(truth[0]) != 1:
                continue
            label = next(iter(truth[0]))
            text = last_user_message(entry["question"])
            if label in renamed and text:
                requests.append(
                    {"text": text, "tool": renamed[label], "source": category, "id": entry["id"]}
                )
    return sorted(tools.values(), key=lambda t: t["name"]), requests


def _shorten(schema: dict[str, Any]) -> None:
    for sub in (schema.get("properties") or {}).values():
        if len(sub.get("description", "")) > LONG:
            del sub["description"]
        _shorten(sub)
        if "items" in sub:
            _shorten(sub["items"])


def dumps(rows: list[dict[str, Any]]) -> str:
    """One row a line: compact, and still readable and diffable."""
    body = ",\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows)
    return "[\n" + body + "\n]\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, help="the bfcl-eval wheel, or where it was unzipped")
    args = parser.parse_args(argv)
    tools, requests = build(Source(args.wheel))
    catalogue, labelled = dumps(tools), dumps(requests)
    if len(catalogue.encode()) + len(labelled.encode()) > MAX_BYTES:
        for tool in tools:
            _shorten(tool["input_schema"])
        catalogue = dumps(tools)
    CATALOGUE.write_text(catalogue, encoding="utf-8")
    REQUESTS.write_text(labelled, encoding="utf-8")
    print(f"{len(tools)} tools ({len(catalogue) // 1024} KiB) -> {CATALOGUE}")
    print(f"{len(requests)} requests ({len(labelled) // 1024} KiB) -> {REQUESTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
