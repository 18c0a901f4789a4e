"""The tables ``python -m bench.tool_selection`` prints, as Markdown (the docs take them
as they are), and the latency targets judged."""

from __future__ import annotations

from typing import Any

from .accuracy import STRATEGIES as ACCURACY_ROWS
from .latency import STRATEGIES as LATENCY_ROWS

# p50 targets in milliseconds, by number of tools, for these strategies.
TARGETS_MS = {200: 5.0, 5000: 25.0}
TARGETED = ("lexical", "hybrid")


def accuracy_table(figures: dict[str, Any]) -> str:
    head = (
        f"{figures['requests']} requests, {figures['tools']} tools\n\n"
        "| strategy | top-1 | top-5 | MRR |\n|---|---:|---:|---:|"
    )
    rows = [
        f"| {name} | {s['top1']:.1%} | {s['top5']:.1%} | {s['mrr']:.3f} |"
        for name, s in ((n, figures["strategies"][n]) for n in ACCURACY_ROWS)
    ]
    return "\n".join([head, *rows])


def by_source_table(figures: dict[str, Any]) -> str:
    sources = sorted(figures["strategies"]["hybrid"]["by_source"])
    head = "| strategy | " + " | ".join(f"{s} top-1" for s in sources) + " |"
    rule = "|---|" + "---:|" * len(sources)
    rows = []
    for name in ACCURACY_ROWS:
        by_source = figures["strategies"][name]["by_source"]
        cells = " | ".join(f"{by_source[s]['top1']:.1%}" for s in sources)
        rows.append(f"| {name} | {cells} |")
    counts = " | ".join(
        str(figures["strategies"]["hybrid"]["by_source"][s]["requests"]) for s in sources
    )
    return "\n".join([head, rule, *rows, f"| requests | {counts} |"])


def latency_table(latency: dict[str, Any]) -> str:
    """One row per strategy; p50 / p99 per catalogue size and way of measuring."""
    columns = [
        (way, size)
        for way in ("in_process", "route", "http")
        for size in sorted(latency.get(way, {}), key=int)
    ]
    if not columns:
        return "(no latency measured)"
    label = {"in_process": "ToolIndex", "route": "route()", "http": "HTTP"}
    head = "| strategy | " + " | ".join(f"{label[w]}, {s} tools" for w, s in columns) + " |"
    rule = "|---|" + "---:|" * len(columns)
    rows = []
    for name in LATENCY_ROWS:
        cells = []
        for way, size in columns:
            cell = latency[way][size][name]
            cells.append(f"{cell['p50_ms']:.2f} / {cell['p99_ms']:.2f}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *rows]) + "\n\np50 / p99 in milliseconds."


def verdicts(latency: dict[str, Any]) -> list[str]:
    """Each target against each measurement that exists."""
    lines = []
    for way, sizes in latency.items():
        for size, cells in sizes.items():
            target = TARGETS_MS.get(int(size))
            if target is None:
                continue
            for name in TARGETED:
                p50 = cells[name]["p50_ms"]
                verdict = "meets" if p50 <= target else "MISSES"
                lines.append(
                    f"{verdict} target: {name} {way} at {size} tools p50 {p50:.2f} ms"
                    f" (target <= {target:g} ms)"
                )
    return lines
