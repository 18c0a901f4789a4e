"""The tool-selection set of ``bench/tool_selection`` (built from BFCL by its
``build_dataset.py``) holds together, and the new ranking beats the old one on it."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.tool_selection import dataset
from bench.tool_selection.accuracy import BASELINE, evaluate, rankers
from router.tools.config import TOOL_NAME_RE
from router.tools.selection.index import ToolIndex


@pytest.fixture(scope="module")
def tools() -> list[dict]:
    return dataset.load_tools()


@pytest.fixture(scope="module")
def requests() -> list[dataset.Request]:
    return dataset.load_requests()


def test_enough_tools_and_requests(tools, requests):
    assert len(tools) >= 150
    assert len(requests) >= 1000
    assert all(r.text.strip() for r in requests)
    assert len({(r.source, r.id) for r in requests}) == len(requests)


def test_tools_are_unique_valid_and_described(tools):
    names = Counter(t["name"] for t in tools)
    assert names.most_common(1)[0][1] == 1
    assert all(TOOL_NAME_RE.match(name) for name in names)
    assert all(t["input_schema"]["type"] == "object" for t in tools)
    assert sum(bool(t["description"]) for t in tools) >= 0.95 * len(tools)


def test_every_label_is_a_catalogue_tool(tools, requests):
    names = {t["name"] for t in tools}
    assert {r.tool for r in requests} <= names


def test_copies_for_5000_tools_are_valid_and_unique(tools):
    large = dataset.scaled(tools, 5000)
    assert len(large) == 5000 == len({t["name"] for t in large})
    assert all(TOOL_NAME_RE.match(t["name"]) for t in large)


def test_hybrid_finds_more_than_plain_bm25(tools, requests):
    registry = dataset.registry_of(tools)
    assert sorted(t.name for t in registry) == sorted(t["name"] for t in tools)
    ranks = rankers(registry, ToolIndex(list(registry)))
    first = requests[:200]
    before = evaluate(ranks[BASELINE], first)
    after = evaluate(ranks["hybrid"], first)
    assert before["requests"] == after["requests"] == 200
    assert 0 < before["top5"] <= after["top5"]
