"""The labelled set (``catalogue.json``, ``requests.json``; see ``SOURCES.md``) and the
catalogues measured: the full one, a seeded 200-tool sample, and 5,000 tools made of the
real ones and suffixed copies of them."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from router.tools.config import TOOL_NAME_RE, parse_config
from router.tools.registry import ToolRegistry

HERE = Path(__file__).resolve().parent
CATALOGUE = HERE / "catalogue.json"
REQUESTS = HERE / "requests.json"
# Every tool runs the bench's no-op: only the ranking is measured, never a call.
HANDLER = "bench.tools:noop"
SEED = 26


@dataclass(frozen=True, slots=True)
class Request:
    text: str
    tool: str
    source: str
    id: str


def load_tools(path: Path = CATALOGUE) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return tools


def load_requests(path: Path = REQUESTS) -> list[Request]:
    return [Request(**row) for row in json.loads(path.read_text(encoding="utf-8"))]


def config_of(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A toolrouter config with these tools, each on the no-op handler."""
    return {"tools": [{**tool, "handler": HANDLER} for tool in tools]}


def registry_of(tools: Sequence[dict[str, Any]]) -> ToolRegistry:
    """The registry toolrouter would build from a config of these tools (JSON is YAML)."""
    text = json.dumps(config_of(tools))
    return ToolRegistry.from_config(parse_config(text, file="tool_selection", env={}))


def write_config(tools: Sequence[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config_of(tools), sort_keys=False), encoding="utf-8")
    return path


def sample(tools: Sequence[dict[str, Any]], size: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``size`` tools drawn at random (seeded), in catalogue order."""
    chosen = set(random.Random(seed).sample(range(len(tools)), min(size, len(tools))))
    return [tool for i, tool in enumerate(tools) if i in chosen]


def labelled_in(requests: Sequence[Request], tools: Sequence[dict[str, Any]]) -> list[Request]:
    """The requests whose right tool is among ``tools``."""
    names = {t["name"] for t in tools}
    return [r for r in requests if r.tool in names]


def scaled(tools: Sequence[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """``size`` tools: the real ones, then copies named ``<name>_v2``, ``<name>_v3``… with
    the same description and parameters, round after round until there are enough."""
    out = list(tools)[:size]
    taken = {t["name"] for t in out}
    copy = 1
    while len(out) < size:
        copy += 1
        suffix = f"_v{copy}"
        for tool in tools:
            if len(out) >= size:
                break
            name = tool["name"][: 64 - len(suffix)] + suffix
            if name in taken or not TOOL_NAME_RE.match(name):
                continue
            taken.add(name)
            out.append({**tool, "name": name})
    return out


def shuffled(requests: Sequence[Request], count: int, seed: int = SEED) -> list[Request]:
    """``count`` requests in a seeded random order, repeating the set if it is shorter."""
    if not requests:
        return []
    order = list(requests)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(count)]
