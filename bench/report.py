"""The figures as ratios to the baseline, judged against SPEC §15, and printed as a table."""

from __future__ import annotations

from typing import Any

from .celery_runs import PAIRED_CELERY_LATENCY

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


def baseline_for(report: dict[str, Any], backend: str) -> dict[str, Any]:
    """The baseline a backend is compared with: the Celery runs around it, and for the
    latency the ``delay().get()`` round trips taken in turn with the backend's own."""
    base = dict(report.get("baseline_for", {}).get(backend) or report["baseline"])
    paired = report["toolrouter"].get(backend, {}).get(PAIRED_CELERY_LATENCY)
    if paired is not None:
        base["latency"] = paired
    return base


def judge(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One verdict per SPEC §15 target and backend."""
    verdicts = []
    for backend, tr in report["toolrouter"].items():
        base = baseline_for(report, backend)
        f = figures(tr)
        checks = [
            ("e2e throughput >= 1.0 x Celery", f["e2e"] / base["e2e_throughput_per_s"], ">=", 1.0),
            ("batch >= 10 x Celery delay() rate", f["batch"] / base["submit_rate_per_s"], ">=", 10),
            (
                "latency p50 <= 1.5 x Celery delay().get()",
                f["latency_p50"] / base["latency"]["p50_ms"],
                "<=",
                1.5,
            ),
            ("approval to start p50 <= 50 ms", f["approval_p50"], "<=", 50),
            ("approval to start p99 <= 250 ms", f["approval_p99"], "<=", 250),
            ("full audit table within 20 %", f["audit"] / f["e2e"], ">=", 0.8),
        ]
        cli = tr.get("cli_start")
        if cli:
            checks.append(
                ("toolrouter --help median <= 500 ms", cli["help"]["median_ms"], "<=", 500)
            )
            checks.append(
                ("approvals list median <= 500 ms", cli["approvals_list"]["median_ms"], "<=", 500)
            )
        for name, value, op, target in checks:
            met = value >= target if op == ">=" else value <= target
            verdicts.append(
                {
                    "backend": backend,
                    "target": name,
                    "value": round(value, 3),
                    "met": bool(met),
                }
            )
    return verdicts


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
    widths = [max(len(str(r[i])) for r in [header, *lines]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))

    out = [fmt(header), "-+-".join("-" * w for w in widths), *(fmt(r) for r in lines)]
    cpu = [("raw Celery", report["baseline"].get("e2e_cpu_ms_per_call"))]
    cpu += [(b, report["toolrouter"][b].get("e2e_cpu_ms_per_call")) for b in backends]
    for who, per_process in cpu:
        if per_process:
            parts = ", ".join(f"{name} {ms:.2f}" for name, ms in per_process.items())
            total = sum(ms for ms in per_process.values() if ms == ms)  # nan-safe
            out.append(f"CPU ms per end-to-end call, {who}: {parts} (total {total:.2f})")
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
    for verdict in report["targets"]:
        mark = "met" if verdict["met"] else "NOT met"
        out.append(
            f"{verdict['backend']:<10} {verdict['target']:<42} {verdict['value']:>10} {mark}"
        )
    return "\n".join(out)


def _each(runs: list[dict[str, Any]], dotted: str) -> str:
    return " / ".join(f"{_get(run, dotted):,.1f}" for run in runs)
