"""``python -m bench.tool_selection``: the tool-selection evaluation.

Accuracy (top-1, top-5, MRR) of the plain BM25 ranking from before issue 26 and of the
``lexical``, ``semantic`` and ``hybrid`` strategies, on the labelled BFCL set (all of it,
and a seeded 200-tool sample of it); route latency p50 and p99 at 200 and 5,000 tools, in
process and over HTTP against a real API (port 8741, SQLite in /tmp/bench_ts/state, Redis
db 7). The tables go to the terminal, the figures to ``bench/results/tool_selection.json``
(``tool_selection_quick.json`` for ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from router.tools.selection.index import ToolIndex

from . import dataset, latency, report
from .accuracy import accuracy

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMALL, LARGE = 200, 5000


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tool_selection")
    parser.add_argument(
        "--quick", action="store_true", help="300 requests, fewer latency samples, no HTTP"
    )
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP latency")
    parser.add_argument("--output", type=Path, help="where the JSON goes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    for noisy in ("bm25s", "httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    began = time.perf_counter()
    tools, requests = dataset.load_tools(), dataset.load_requests()
    if args.quick:
        requests = dataset.shuffled(requests, 300)
    per_round, rounds, warmup = (100, 3, 20) if args.quick else (300, 3, 50)
    http_per_round, http_warmup = 150, 30

    figures: dict[str, Any] = {
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "limit": latency.LIMIT,
    }

    registry = dataset.registry_of(tools)
    index = ToolIndex(list(registry))
    figures["accuracy_full"] = accuracy(registry, index, requests)
    _say("Accuracy, full catalogue", report.accuracy_table(figures["accuracy_full"]))
    _say("Top-1 by source file, full catalogue", report.by_source_table(figures["accuracy_full"]))

    small = dataset.sample(tools, SMALL)
    small_requests = dataset.labelled_in(dataset.load_requests(), small)
    if args.quick:
        small_requests = small_requests[:300]
    small_registry = dataset.registry_of(small)
    small_index = ToolIndex(list(small_registry))
    figures["accuracy_200"] = accuracy(small_registry, small_index, small_requests)
    _say(f"Accuracy, {SMALL}-tool sample", report.accuracy_table(figures["accuracy_200"]))

    large = dataset.scaled(tools, LARGE)
    large_registry = dataset.registry_of(large)
    large_index = ToolIndex(list(large_registry))
    catalogues = {
        SMALL: (small, small_registry, small_index, small_requests),
        LARGE: (large, large_registry, large_index, dataset.load_requests()),
    }
    timing: dict[str, Any] = {"in_process": {}, "route": {}, "http": {}}
    for size, (_, size_registry, size_index, asked) in catalogues.items():
        drawn = dataset.shuffled(asked, warmup + per_round * rounds)
        timing["in_process"][str(size)] = latency.in_process(
            size_index, drawn, warmup=warmup, rounds=rounds
        )
        timing["route"][str(size)] = latency.via_route(
            size_registry, size_index, drawn, warmup=warmup, rounds=rounds
        )
    if not (args.quick or args.no_http):
        for size, (size_tools, _, _, asked) in catalogues.items():
            drawn = dataset.shuffled(asked, http_warmup + http_per_round * rounds, seed=size)
            timing["http"][str(size)] = latency.over_http(
                size_tools, drawn, warmup=http_warmup, rounds=rounds
            )
    else:
        del timing["http"]
    figures["latency"] = timing
    _say("Route latency", report.latency_table(timing))
    figures["verdicts"] = report.verdicts(timing)
    print("\n".join(figures["verdicts"]))

    figures["seconds"] = round(time.perf_counter() - began, 1)
    output = args.output or RESULTS / (
        "tool_selection_quick.json" if args.quick else "tool_selection.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(f"\n{figures['seconds']} s; figures in {output}")
    return 0


def _say(title: str, table: str) -> None:
    print(f"\n## {title}\n\n{table}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
