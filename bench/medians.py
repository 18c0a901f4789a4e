"""``python -m bench.medians RUN.json ...``: each target's figure in every run, its median,
and whether the median meets the target.

One run moves with a shared machine; the verdict that counts is the median of several
(``python -m bench`` writes one JSON file per run).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from .report import grid
from .targets import judge, target_named


def medians(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target, deployment and database: the figure of each run that measured it, the
    median, the bound and whether the median meets it."""
    runs: dict[tuple[str, str, str], list[float]] = {}
    bounds: dict[tuple[str, str, str], float] = {}
    for report in reports:
        for verdict in judge(report):
            where = (verdict["target"], verdict["deployment"], verdict["backend"])
            runs.setdefault(where, []).append(verdict["value"])
            bounds[where] = verdict["bound"]
    out = []
    for (target, deployment, backend), values in runs.items():
        median = statistics.median(values)
        out.append(
            {
                "target": target,
                "deployment": deployment,
                "backend": backend,
                "runs": values,
                "median": round(median, 3),
                "bound": bounds[(target, deployment, backend)],
                "met": target_named(target).met(median, backend),
            }
        )
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        op = target_named(row["target"]).op
        lines.append(
            [
                row["target"],
                f"{row['deployment']} {row['backend']}",
                " / ".join(f"{value:g}" for value in row["runs"]),
                f"{row['median']:g}",
                f"{op} {row['bound']:g}",
                "met" if row["met"] else "NOT met",
            ]
        )
    return grid(["target", "where", "each run", "median", "target", ""], lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.medians", description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files of `python -m bench`")
    args = parser.parse_args(argv)
    reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.runs]
    print("\n".join(table(medians(reports))))
    smoke = [str(path) for path, report in zip(args.runs, reports, strict=True) if report["smoke"]]
    if smoke:
        print(f"smoke runs, too small to judge anything by: {', '.join(smoke)}")


if __name__ == "__main__":
    main()
