"""The figures as ratios to the baseline, printed as tables with their verdicts."""

from __future__ import annotations

from typing import Any

from .celery_runs import IN_FLIGHT_KEY, PAIRED_CELERY_LATENCY
from .targets import baseline_for, target_named

# (key, label, where the baseline figure is, if there is one)
ROWS = [
    ("e2e", "end-to-end throughput, ungated no-op (calls/s)", "e2e_throughput_per_s"),
    ("batch", "batch submission, 10,000 calls (calls/s)", "submit_rate_per_s"),
    ("latency_p50", "POST /v1/calls wait_s latency p50 (ms)", "latency.p50_ms"),
    ("latency_p99", "POST /v1/calls wait_s latency p99 (ms)", "latency.p99_ms"),
    ("approval_p50", "approval to handler start p50 (ms)", None),
    ("approval_p99", "approval to handler start p99 (ms)", None),
    ("audit", "throughput with the full audit table (calls/s)", None),
]


def _get(data: dict[str, Any], dotted: str) -> float:
    value: Any = data
    for part in dotted.split("."):
        value = value[part]
    return float(value)


def figures(tr: dict[str, Any]) -> dict[str, float]:
    return {
        "e2e": tr["e2e_throughput_per_s"],
        "batch": tr["batch_submit_per_s"],
        "latency_p50": tr["latency"]["p50_ms"],
        "latency_p99": tr["latency"]["p99_ms"],
        "approval_p50": tr["approval_to_start"]["p50_ms"],
        "approval_p99": tr["approval_to_start"]["p99_ms"],
        "audit": tr["e2e_throughput_full_audit_per_s"],
    }


def table(report: dict[str, Any]) -> str:
    """Per backend two columns: raw Celery around it, and toolrouter (with the ratio)."""
    backends = list(report["toolrouter"])
    header = [""]
    for backend in backends:
        header += [f"raw Celery ({backend})", backend]
    lines = []
    for key, label, base_key in ROWS:
        row = [label]
        for backend in backends:
            base = baseline_for(report, backend)
            row.append(f"{_get(base, base_key):,.1f}" if base_key else "—")
            tr = report["toolrouter"][backend]
            value = figures(tr)[key]
            if base_key:
                ratio = f" ({value / _get(base, base_key):.2f}x)"
            elif key == "audit":
                ratio = f" ({value / figures(tr)['e2e']:.2f}x empty)"
            else:
                ratio = ""
            row.append(f"{value:,.1f}{ratio}")
        lines.append(row)
    out = grid(header, lines)
    cpu = [("raw Celery", report["baseline"].get("e2e_cpu_ms_per_call"))]
    cpu += [(b, report["toolrouter"][b].get("e2e_cpu_ms_per_call")) for b in backends]
    for who, per_process in cpu:
        if per_process:
            parts = ", ".join(f"{name} {ms:.2f}" for name, ms in per_process.items())
            total = sum(ms for ms in per_process.values() if ms == ms)  # nan-safe
            out.append(f"CPU ms per end-to-end call, {who}: {parts} (total {total:.2f})")
    out += ["", *costs_tables(report), *up_table(report)]
    runs = report.get("baseline_runs", [])
    if len(runs) > 1:
        out.append(
            "raw Celery run by run (before each backend and at the end; each backend is"
            " compared with the two runs around it):"
            f" end to end {_each(runs, 'e2e_throughput_per_s')} calls/s,"
            f" delay() {_each(runs, 'submit_rate_per_s')}/s,"
            f" delay().get() p50 {_each(runs, 'latency.p50_ms')} ms"
        )
    if any(PAIRED_CELERY_LATENCY in report["toolrouter"][b] for b in backends):
        out.append(
            "latency: each toolrouter call alternated with a raw Celery delay().get(), both"
            " up (the raw Celery latency beside each backend is from those pairs)"
        )
    for backend in backends:
        cli = report["toolrouter"][backend].get("cli_start")
        if cli:
            out.append(
                f"CLI start ({backend}), median / worst wall time: toolrouter --help "
                f"{cli['help']['median_ms']:.0f} / {cli['help']['max_ms']:.0f} ms, "
                f"approvals list {cli['approvals_list']['median_ms']:.0f} / "
                f"{cli['approvals_list']['max_ms']:.0f} ms"
            )
    load = report.get("load", {})
    start, end = load.get("start", {}).get("steal_s"), load.get("end", {}).get("steal_s")
    if start is not None and end is not None:
        out.append(f"CPU time stolen by the hypervisor during the run: {end - start:.1f} s")
    out.append("")
    out += verdict_lines(report["targets"])
    return "\n".join(out)


def verdict_lines(verdicts: list[dict[str, Any]]) -> list[str]:
    """One line per target judged: where, what, the figure, its bound, met or not."""
    lines = []
    for verdict in verdicts:
        where = f"{verdict['deployment']} {verdict['backend']}"
        op = target_named(verdict["target"]).op
        mark = "met" if verdict["met"] else "NOT met"
        lines.append(
            f"{where:<17} {verdict['target']:<46} {verdict['value']:>9} "
            f"{op} {verdict['bound']:<6} {mark}"
        )
    return lines


def grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """A header and rows as aligned text lines."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))

    return [fmt(header), "-+-".join("-" * w for w in widths), *(fmt(r) for r in rows)]


# The cost table's rows, and which process of each run they read (raw Celery's worker is
# ``celery-baseline``).
COMPONENTS = ("client", "api", "worker", "approvals", "database", "redis")


def costs_tables(report: dict[str, Any]) -> list[str]:
    """Plain clients beside raw Celery, CPU per call per component, resident memory."""
    backends = [b for b in report["toolrouter"] if "plain_clients" in report["toolrouter"][b]]
    if not backends:
        return []
    out: list[str] = []
    header = ["end to end, submit-and-wait (calls/s)"]
    for backend in backends:
        header += [f"raw Celery ({backend})", f"{backend} httpx", f"{backend} aiohttp"]
    rows = []
    for n in report["toolrouter"][backends[0]]["plain_clients"]["httpx"]:
        row = [f"{n} in flight"]
        for backend in backends:
            base = baseline_for(report, backend)
            same, e2e = base[IN_FLIGHT_KEY][n]["per_s"], base["e2e_throughput_per_s"]
            row.append(f"{same:,.1f}")
            plain = report["toolrouter"][backend]["plain_clients"]
            for client in ("httpx", "aiohttp"):
                value = plain[client][n]["per_s"]
                row.append(f"{value:,.1f} ({value / same:.2f}x; {value / e2e:.2f}x e2e)")
        rows.append(row)
    out += grid(header, rows)
    out.append(
        "ratios: to raw Celery with as many tasks in flight (a window of delay()s, the"
        " oldest's get() before the next), and ('e2e') to raw Celery's end-to-end figure"
        " above (every task submitted at once)"
    )
    limits = report["toolrouter"][backends[0]]["plain_clients"]["limits"]
    out.append("connection limits: " + "; ".join(f"{k}: {v}" for k, v in limits.items()))

    columns: list[tuple[str, dict[str, float]]] = [
        ("raw Celery", _renamed(report["baseline"].get("e2e_cpu_ms_per_call", {})))
    ]
    for backend in backends:
        tr = report["toolrouter"][backend]
        columns.append((f"{backend} (Python client)", tr["e2e_cpu_ms_per_call"]))
        for client in ("httpx", "aiohttp"):
            columns.append(
                (f"{backend} {client} 64", tr["plain_clients"][client]["64"]["cpu_ms_per_call"])
            )
    rows = []
    for component in COMPONENTS:
        row = [component]
        for name, cpu in columns:
            if component in cpu:
                row.append(f"{cpu[component]:.2f}")
            elif component == "database" and name.startswith("sqlite"):
                row.append("(in api, worker)")
            else:
                row.append("—")
        rows.append(row)
    totals = [sum(v for v in cpu.values() if v == v) for _, cpu in columns]  # nan-safe
    rows.append(["total", *(f"{t:.2f}" for t in totals)])
    out += ["", *grid(["CPU ms per call", *(name for name, _ in columns)], rows)]
    out.append(
        "database: the PostgreSQL server's processes (other databases on that server count"
        " too); redis: the redis-server on the bench's Redis URL (other Redis dbs count too)"
    )

    header = ["resident memory (MiB)"]
    for backend in backends:
        header += [f"{backend} idle", f"{backend} peak under load"]
    rows = []
    for process in report["toolrouter"][backends[0]]["rss_mib"]["idle"]:
        row = [process]
        for backend in backends:
            rss = report["toolrouter"][backend]["rss_mib"]
            row += [f"{rss['idle'][process]:,.1f}", f"{rss['load_peak'][process]:,.1f}"]
        rows.append(row)
    out += ["", *grid(header, rows)]
    out.append(
        "each process with its children (the API's, the worker's pool); idle after the"
        " warm-up, peak sampled every 0.1 s during the Python client's throughput runs"
    )
    return out


def up_table(report: dict[str, Any]) -> list[str]:
    """``toolrouter up`` (Flower watching) beside raw Celery, per backend."""
    ups = report.get("up", {})
    if not ups:
        return []
    header = ["toolrouter up, Flower watching"]
    for backend in ups:
        header += [f"raw Celery ({backend})", f"up ({backend})"]
    lines: list[list[str]] = []
    keys = [
        ("end to end, Python client, 64 in flight (calls/s)", "e2e_throughput_per_s", None),
        ("batch submission (calls/s)", "batch_submit_per_s", "submit_rate_per_s"),
        ("wait_s latency p50 (ms), in pairs", "latency.p50_ms", None),
        ("wait_s latency p99 (ms), in pairs", "latency.p99_ms", None),
    ]
    for label, key, base_key in keys:
        row = [label]
        for backend, up in ups.items():
            base = baseline_for(report, backend)
            if key.startswith("latency"):
                base = {"latency": up[PAIRED_CELERY_LATENCY]}
            reference = _get(base, base_key or key)
            value = _get(up, key)
            row += [f"{reference:,.1f}", f"{value:,.1f} ({value / reference:.2f}x)"]
        lines.append(row)
    for client in ("httpx", "aiohttp"):
        for n in ("16", "64"):
            row = [f"{client}, {n} in flight (calls/s)"]
            for backend, up in ups.items():
                same = baseline_for(report, backend)[IN_FLIGHT_KEY][n]["per_s"]
                value = up["plain_clients"][client][n]["per_s"]
                row += [f"{same:,.1f}", f"{value:,.1f} ({value / same:.2f}x)"]
            lines.append(row)
    out = ["", *grid(header, lines)]
    for backend, up in ups.items():
        parts = ", ".join(f"{k} {v:.2f}" for k, v in up["e2e_cpu_ms_per_call"].items())
        out.append(f"CPU ms per end-to-end call, up ({backend}): {parts}")
    return out


def _renamed(cpu: dict[str, float]) -> dict[str, float]:
    return {("worker" if name == "celery-baseline" else name): ms for name, ms in cpu.items()}


def _each(runs: list[dict[str, Any]], dotted: str) -> str:
    return " / ".join(f"{_get(run, dotted):,.1f}" for run in runs)
