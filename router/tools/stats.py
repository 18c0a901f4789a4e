"""Per-tool statistics from the system of record: calls, success rate, latency, cost, errors.

Read from the database, so every API process reports the same figures and nothing is lost
when a process restarts. A call's row holds only its last outcome, which a fallback may
have given; the success rate, latency and errors are the tool's own runs, read from the
audit log along its index on tool and sequence, where each run that ended (``ok``,
``error``, ``interrupted``) has a row under the tool that ran, a run that fell back to
another tool included, and a run whose handler ran holds how long it ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from ..db.schema import audit_log, calls
from ..status import AuditEvent, CallStatus
from .registry import ToolRegistry

WINDOW = 1000
_RUN_ENDS = (AuditEvent.OK, AuditEvent.ERROR, AuditEvent.INTERRUPTED)
# A call that ended so was run, unless its answer came from the cache: what costs.
RAN = (CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.INTERRUPTED)


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a tool's last ``WINDOW`` ended runs measured (cached answers and calls that
    never reached a worker are no runs)."""

    succeeded: int
    failed: int
    errors_by_type: dict[str, int]
    durations_ms: list[int]  # sorted; the runs that recorded one

    @property
    def success_rate(self) -> float | None:
        runs = self.succeeded + self.failed
        return round(self.succeeded / runs, 4) if runs else None

    def latency_s(self, fraction: float) -> float | None:
        """The ``fraction`` percentile of the runs' durations, in seconds."""
        if not self.durations_ms:
            return None
        last = len(self.durations_ms) - 1
        return self.durations_ms[min(last, round(fraction * last))] / 1000


def run_figures(conn: Connection, name: str) -> RunFigures:
    """The tool's last ``WINDOW`` ended runs, from the audit log (an index range, however
    many calls the database holds)."""
    rows = conn.execute(
        select(audit_log.c.event, audit_log.c.detail)
        .where(and_(audit_log.c.tool == name, audit_log.c.event.in_(_RUN_ENDS)))
        .order_by(audit_log.c.seq.desc())
        .limit(WINDOW)
    ).all()
    succeeded = failed = 0
    errors: dict[str, int] = {}
    durations: list[int] = []
    for row in rows:
        detail = json.loads(row.detail) if row.detail else {}
        if not isinstance(detail, dict) or "attempt" not in detail or detail.get("cached"):
            # Not a run of the tool: a call failed before any worker had it (its message
            # refused by the broker), or an answer from the cache.
            continue
        ran_ms = detail.get("ms")
        if isinstance(ran_ms, int) and not isinstance(ran_ms, bool):
            durations.append(ran_ms)
        if row.event == AuditEvent.OK:
            succeeded += 1
            continue
        failed += 1
        kind = detail.get("error_type")
        kind = kind or ("Interrupted" if row.event == AuditEvent.INTERRUPTED else None)
        if kind:
            errors[kind] = errors.get(kind, 0) + 1
    return RunFigures(succeeded, failed, errors, sorted(durations))


def tool_stats(conn: Connection, registry: ToolRegistry, name: str) -> dict[str, Any]:
    """Calls of ``name`` by status, over all of them; success rate, latency and errors
    over its last ``WINDOW`` runs."""
    tool = registry.get(name)
    rows = conn.execute(
        select(calls.c.status, calls.c.cached, func.count())
        .where(calls.c.tool == name)
        .group_by(calls.c.status, calls.c.cached)
    ).all()
    by_status: dict[str, int] = {}
    ran = 0
    for status, cached, count in rows:
        by_status[str(status)] = by_status.get(str(status), 0) + int(count)
        if status in RAN and not cached:
            ran += int(count)
    runs = run_figures(conn, name)
    cost = tool.spec.cost_per_call if tool else 0.0
    return {
        "tool": name,
        "calls": sum(by_status.values()),
        "by_status": by_status,
        "success_rate": runs.success_rate,
        "latency_p50_s": runs.latency_s(0.50),
        "latency_p95_s": runs.latency_s(0.95),
        "cost": round(ran * cost, 6),
        "errors_by_type": runs.errors_by_type,
    }


def cost_by_key(conn: Connection, registry: ToolRegistry) -> dict[str, float]:
    """What each key has spent: calls that ran (not answered from the cache), times their
    tool's ``cost_per_call``."""
    rows = conn.execute(
        select(calls.c.requested_by, calls.c.tool, func.count())
        .where(and_(calls.c.status.in_(RAN), calls.c.cached.is_(None)))
        .group_by(calls.c.requested_by, calls.c.tool)
    ).all()
    spent: dict[str, float] = {}
    for key, tool_name, count in rows:
        tool = registry.get(tool_name)
        spent[key] = round(
            spent.get(key, 0.0) + count * (tool.spec.cost_per_call if tool else 0), 6
        )
    return spent
