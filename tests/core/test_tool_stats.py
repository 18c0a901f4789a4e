"""A tool's measured figures come from its own runs in the audit log, on both databases:
the durations its handler ran, as the worker writes them, the last ``WINDOW`` of them,
whatever the calls table holds."""

from __future__ import annotations

from router.audit import entries
from router.audit.entries import AuditEntry
from router.runtime import Runtime
from router.status import AuditEvent
from router.tools import stats
from workers.execution import Executor

from ..support.audit import call_audit_rows
from ..support.calls import queue_call


def run(tool: str, n: int, *, ms: int | None, error_type: str | None = None) -> AuditEntry:
    return entries.finished(
        event=AuditEvent.ERROR if error_type else AuditEvent.OK,
        actor="worker@test",
        tool=tool,
        call_id=f"call_{n:032x}",
        request_id=None,
        attempt=1,
        failed=error_type is not None,
        error="it broke" if error_type else None,
        error_type=error_type,
        ran_ms=ms,
    )


def append(runtime: Runtime, runs: list[AuditEntry]) -> None:
    with runtime.store.transaction() as conn:
        runtime.audit.append(conn, runs, at=runtime.clock())


def test_latency_success_and_errors_are_the_tools_runs_without_any_call_row(
    runtime: Runtime,
) -> None:
    # Nine runs of 10-90 ms, two of them failed; one cached answer, which did not run.
    runs = [run("echo", n, ms=10 * n) for n in range(1, 8)]
    runs += [run("echo", 8, ms=80, error_type="TimeoutError")]
    runs += [run("echo", 9, ms=90, error_type="ValueError"), run("echo", 10, ms=None)]
    append(runtime, [*runs, run("value", 11, ms=5000)])
    with runtime.store.reading() as conn:
        figures = stats.run_figures(conn, "echo")
        shown = stats.tool_stats(conn, runtime.registry, "echo")
    assert figures.durations_ms == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert (shown["latency_p50_s"], shown["latency_p95_s"]) == (0.05, 0.09)
    assert shown["success_rate"] == round(8 / 10, 4)
    assert shown["errors_by_type"] == {"TimeoutError": 1, "ValueError": 1}
    assert shown["calls"] == 0  # the call rows are not where these come from


def test_only_the_last_window_of_runs_counts(runtime: Runtime) -> None:
    # A slow, failing past, then a window's worth of quick successes.
    append(runtime, [run("echo", n, ms=9000, error_type="Slow") for n in range(50)])
    recent = [run("echo", 50 + n, ms=3) for n in range(stats.WINDOW)]
    append(runtime, recent)
    with runtime.store.reading() as conn:
        figures = stats.run_figures(conn, "echo")
    assert figures.success_rate == 1.0
    assert figures.errors_by_type == {}
    assert (figures.latency_s(0.5), figures.latency_s(0.95)) == (0.003, 0.003)


def test_a_run_records_how_long_its_handler_ran(runtime: Runtime, executor: Executor) -> None:
    call_id = queue_call(runtime, "sleep", {"seconds": 0.05})
    assert executor.run(call_id, "sleep") == "ok"
    ended = call_audit_rows(runtime, call_id)[-1]
    assert ended["event"] == AuditEvent.OK
    assert ended["detail"]["ms"] >= 50


def test_each_tool_of_a_fallback_records_its_own_run(runtime: Runtime, executor: Executor) -> None:
    call_id = queue_call(runtime, "search_primary", {"q": "x"})
    executor.run(call_id, "search_primary")
    runs = [
        (row["tool"], row["event"], row["detail"].get("ms"))
        for row in call_audit_rows(runtime, call_id)
        if row["event"] in (AuditEvent.OK, AuditEvent.ERROR)
    ]
    assert [(tool, event) for tool, event, _ in runs] == [
        ("search_primary", AuditEvent.ERROR),
        ("search_backup", AuditEvent.OK),
    ]
    assert all(isinstance(ms, int) and ms >= 0 for _, _, ms in runs), runs
    with runtime.store.reading() as conn:
        assert stats.run_figures(conn, "search_primary").durations_ms == [runs[0][2]]


def test_calls_that_never_ran_are_not_counted_as_runs(runtime: Runtime) -> None:
    """A call failed because the broker refused its message never reached a worker, and a
    cached answer ran nothing: neither moves the tool's success rate."""
    never = entries.unpublished(
        actor="api", tool="echo", call_id=f"call_{99:032x}", error="unavailable: redis down"
    )
    cached = entries.finished(
        event=AuditEvent.OK,
        actor="worker@test",
        tool="echo",
        call_id=f"call_{98:032x}",
        request_id=None,
        attempt=1,
        cached=True,
    )
    append(runtime, [*(run("echo", n, ms=5) for n in range(3)), never, cached])
    with runtime.store.reading() as conn:
        figures = stats.run_figures(conn, "echo")
    assert (figures.succeeded, figures.failed, figures.success_rate) == (3, 0, 1.0)
    assert figures.errors_by_type == {}
