"""The documentation site builds under ``--strict``, and its references cover the code.

The reference pages are generated at build time by ``docs/hooks/references.py``; these
tests build the site as CI does, then look for every settings variable, tool-config key,
HTTP operation and CLI command in the pages, and check that the hook refuses a field with
no description. The Grafana dashboard shipped with the docs must chart every metric the
code defines and no other. No services are needed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from router.settings import Settings
from router.tools.config import ToolSpec

from .support.launcher import REPO

HOOKS = REPO / "docs" / "hooks"
DASHBOARD = REPO / "docs" / "grafana" / "toolrouter.json"
# Where metrics are defined: the counted ones, and those read at scrape time.
METRIC_SOURCES = (REPO / "router" / "metrics.py", REPO / "router" / "api" / "exposition.py")
METRIC_CLASSES = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
}
METRIC_NAME = re.compile(r"\btoolrouter_[a-z0-9_]+")
# The series prometheus-client exposes for a histogram, beside its name.
HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module exactly as CI builds it."""
    out = tmp_path_factory.mktemp("site")
    # Material prints a banner about MkDocs 2 on every build; it is not a warning of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def hooks() -> Iterator[dict[str, ModuleType]]:
    """The hook's modules, imported as MkDocs imports them (their folder on the path)."""
    sys.path.insert(0, str(HOOKS))
    try:
        yield {
            name: importlib.import_module(name) for name in ("refs_fields", "refs_cli", "refs_http")
        }
    finally:
        sys.path.remove(str(HOOKS))


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def section(html: str, anchor: str) -> str:
    """The HTML from the heading with id ``anchor`` to the next heading of its level."""
    start = html.index(f'id="{anchor}"')
    level = html.rfind("<h", 0, start)
    tag = html[level : level + 3]
    end = html.find(f"<{tag[1:]}", start)
    return html[start : end if end != -1 else len(html)]


def test_the_site_builds_strict_and_keeps_the_inbox_screenshot(site: Path) -> None:
    assert (site / "index.html").exists()
    assert (site / "inbox.png").exists()
    assert 'src="../../inbox.png"' in page(site, "how-to/inbox")


def test_every_setting_is_in_the_settings_reference(site: Path) -> None:
    html = page(site, "reference/settings")
    prefix = Settings.model_config.get("env_prefix", "")
    missing = [
        name
        for name in Settings.model_fields
        if f"<td><code>{prefix}{name.upper()}</code></td>" not in html
    ]
    assert missing == []


def test_every_tool_key_is_in_the_tool_config_reference(site: Path) -> None:
    tools = section(page(site, "reference/tool-config"), "toolspec")
    missing = [name for name in ToolSpec.model_fields if f"<td><code>{name}</code>" not in tools]
    assert missing == []


def test_every_http_operation_is_in_the_api_reference(
    site: Path, hooks: dict[str, ModuleType]
) -> None:
    html = page(site, "reference/http-api")
    document = hooks["refs_http"].openapi_document()
    operations = [
        f"<code>{method.upper()} {path}</code>"
        for path, item in document["paths"].items()
        for method in item
    ]
    assert len(operations) > 10
    assert [op for op in operations if op not in html] == []


def test_every_cli_command_is_in_the_cli_reference(
    site: Path, hooks: dict[str, ModuleType]
) -> None:
    html = page(site, "reference/cli")
    commands = hooks["refs_cli"].commands()
    assert "toolrouter approvals approve" in commands
    assert [c for c in commands if f"<code>{c}</code>" not in html] == []


def test_no_page_points_outside_the_repository(site: Path) -> None:
    """Not to the design document, nor to anything beside the repository."""
    pages = sorted(site.rglob("*.html"))
    outside = [
        f"{path.relative_to(site)}: {match.group(0)}"
        for path in pages
        for match in re.finditer(r"\bSPEC\b|\.\./shared/", path.read_text("utf-8"))
    ]
    assert outside == []


# -- the hook refuses what it cannot describe -------------------------------------------


def load_model_source(tmp_path: Path, source: str) -> ModuleType:
    """A module of pydantic models written to a file, so the hook can read its comments."""
    path = tmp_path / f"docs_models_{tmp_path.name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


MODELS = """
    from pydantic import BaseModel, Field


    class Knobs(BaseModel):
        # How long to wait, in seconds.
        wait_s: float = 1.0
        limit: int = Field(default=5, description="At most this many.")
        retries: int = 3  # Attempts after the first.
        colour: str = "blue"
"""


def test_a_field_without_a_description_fails_the_build(
    tmp_path: Path, hooks: dict[str, ModuleType]
) -> None:
    from mkdocs.exceptions import PluginError

    knobs = load_model_source(tmp_path, MODELS).Knobs
    with pytest.raises(PluginError, match=r"Knobs\.colour has no description"):
        hooks["refs_fields"].descriptions(knobs, {})


def test_descriptions_come_from_comments_pydantic_and_notes(
    tmp_path: Path, hooks: dict[str, ModuleType]
) -> None:
    knobs = load_model_source(tmp_path, MODELS).Knobs
    found = hooks["refs_fields"].descriptions(knobs, {"colour": "The colour of the light."})
    assert found == {
        "wait_s": "How long to wait, in seconds.",
        "limit": "At most this many.",
        "retries": "Attempts after the first.",
        "colour": "The colour of the light.",
    }


@pytest.mark.parametrize(
    ("notes", "complaint"),
    [
        ({"colour": "c", "shade": "s"}, "does not have: ['shade']"),
        ({"colour": "c", "wait_s": "w"}, "wait_s is described in"),
    ],
)
def test_a_note_for_a_missing_or_self_described_field_fails_the_build(
    tmp_path: Path, hooks: dict[str, ModuleType], notes: dict[str, str], complaint: str
) -> None:
    from mkdocs.exceptions import PluginError

    knobs = load_model_source(tmp_path, MODELS).Knobs
    with pytest.raises(PluginError, match=re.escape(complaint)):
        hooks["refs_fields"].descriptions(knobs, notes)


# -- the Grafana dashboard -------------------------------------------------------------------


def defined_metrics() -> dict[str, str]:
    """Every metric the code defines, with its kind: the first argument of each
    prometheus-client constructor called in ``METRIC_SOURCES``."""
    found: dict[str, str] = {}
    for path in METRIC_SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if name in METRIC_CLASSES and isinstance(first, ast.Constant):
                found[str(first.value)] = METRIC_CLASSES[name]
    return found


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    found = []
    for item in board["panels"]:
        found.append(item)
        found += item.get("panels", [])
    return found


def promql(board: dict[str, Any]) -> list[str]:
    """Every query of the dashboard: its panels' and its variables'."""
    queries = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def dashboard_metrics(board: dict[str, Any]) -> set[str]:
    return {
        HISTOGRAM_SERIES.sub("", name)
        for query in promql(board)
        for name in METRIC_NAME.findall(query)
    }


def test_the_code_defines_the_metrics_the_monitor_page_lists() -> None:
    """The parse below finds what it should, so the dashboard tests compare real names."""
    metrics = defined_metrics()
    assert metrics["toolrouter_calls_total"] == "counter"
    assert metrics["toolrouter_call_duration_seconds"] == "histogram"
    assert metrics["toolrouter_queue_depth"] == "gauge"
    monitor = (REPO / "docs" / "how-to" / "monitor.md").read_text(encoding="utf-8")
    assert [name for name in metrics if f"| `{name}` |" not in monitor] == []


def test_the_grafana_dashboard_charts_only_metrics_the_code_defines() -> None:
    unknown = dashboard_metrics(dashboard()) - set(defined_metrics())
    assert unknown == set()


def test_every_metric_the_code_defines_is_on_the_grafana_dashboard() -> None:
    board = dashboard()
    missing = set(defined_metrics()) - dashboard_metrics(board)
    assert missing == set()
    # Histograms are read as quantiles, from their buckets.
    queries = promql(board)
    unquantiled = [
        name
        for name, kind in defined_metrics().items()
        if kind == "histogram"
        and not any("histogram_quantile(" in q and f"{name}_bucket" in q for q in queries)
    ]
    assert unquantiled == []


def test_the_grafana_dashboard_is_importable_and_shipped_with_the_docs(site: Path) -> None:
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    charts = [p for p in panels(board) if p["type"] != "row"]
    assert charts and all(p.get("targets") and p.get("gridPos") for p in charts)
    # Every query asks the data source chosen at import, not one named on the author's side.
    sources = {t["datasource"]["uid"] for p in charts for t in p["targets"]}
    assert sources == {"${datasource}"}
    assert (site / "grafana" / "toolrouter.json").read_bytes() == DASHBOARD.read_bytes()
    assert 'href="../../grafana/toolrouter.json"' in page(site, "how-to/monitor")
