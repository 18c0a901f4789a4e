"""Per-tool statistics from the system of record: calls, success rate, latency, cost, errors.

Read from the database, so every API process reports the same figures and nothing is lost
when a process restarts. A call's row holds only its last outcome, which a fallback may
have given; the success rate and errors are the tool's own runs, read from the audit log,
where each run that ended (``ok``, ``error``, ``interrupted``) has a row under the tool that
ran, a run that fell back to another tool included.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection

from ..db.schema import audit_log, calls
from ..status import AuditEvent, CallStatus
from .registry import ToolRegistry

WINDOW = 1000


def _percentile(sorted_values: list[int], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index] / 1000


def tool_stats(conn: Connection, registry: ToolRegistry, name: str) -> dict[str, Any]:
    """Calls of ``name`` by status, over all of them; success rate and errors over its last
    ``WINDOW`` runs; latency over the last ``WINDOW`` calls it answered."""
    tool = registry.get(name)
    rows = conn.execute(
        select(calls.c.status, func.count()).where(calls.c.tool == name).group_by(calls.c.status)
    ).all()
    by_status: dict[str, int] = {str(status): int(count) for status, count in rows}
    answered = or_(
        calls.c.answered_by == name, and_(calls.c.tool == name, calls.c.answered_by.is_(None))
    )
    recent = conn.execute(
        select(calls.c.started_at, calls.c.finished_at)
        .where(and_(answered, calls.c.finished_at.is_not(None), calls.c.started_at.is_not(None)))
        .order_by(calls.c.finished_at.desc())
        .limit(WINDOW)
    ).all()
    latencies = sorted(row.finished_at - row.started_at for row in recent)
    succeeded, failed, errors = _runs(conn, name)
    ran = by_status.get(CallStatus.SUCCEEDED, 0) + by_status.get(CallStatus.FAILED, 0)
    ran += by_status.get(CallStatus.INTERRUPTED, 0)
    cost = tool.spec.cost_per_call if tool else 0.0
    return {
        "tool": name,
        "calls": sum(by_status.values()),
        "by_status": by_status,
        "success_rate": round(succeeded / (succeeded + failed), 4) if succeeded + failed else None,
        "latency_p50_s": _percentile(latencies, 0.50),
        "latency_p95_s": _percentile(latencies, 0.95),
        "cost": round(ran * cost, 6),
        "errors_by_type": errors,
    }


_RUN_ENDS = (AuditEvent.OK, AuditEvent.ERROR, AuditEvent.INTERRUPTED)


def _runs(conn: Connection, name: str) -> tuple[int, int, dict[str, int]]:
    """The tool's last ``WINDOW`` ended runs: how many succeeded, how many did not, and
    those by error type (read along the audit log's index on tool and sequence)."""
    rows = conn.execute(
        select(audit_log.c.event, audit_log.c.detail)
        .where(and_(audit_log.c.tool == name, audit_log.c.event.in_(_RUN_ENDS)))
        .order_by(audit_log.c.seq.desc())
        .limit(WINDOW)
    ).all()
    succeeded = sum(1 for row in rows if row.event == AuditEvent.OK)
    errors: dict[str, int] = {}
    for row in rows:
        if row.event == AuditEvent.OK:
            continue
        detail = json.loads(row.detail) if row.detail else {}
        kind = detail.get("error_type") if isinstance(detail, dict) else None
        kind = kind or ("Interrupted" if row.event == AuditEvent.INTERRUPTED else None)
        if kind:
            errors[kind] = errors.get(kind, 0) + 1
    return succeeded, len(rows) - succeeded, errors


def cost_by_key(conn: Connection, registry: ToolRegistry) -> dict[str, float]:
    """What each key has spent: calls that ran, times their tool's ``cost_per_call``."""
    rows = conn.execute(
        select(calls.c.requested_by, calls.c.tool, func.count())
        .where(
            calls.c.status.in_([CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.INTERRUPTED])
        )
        .group_by(calls.c.requested_by, calls.c.tool)
    ).all()
    spent: dict[str, float] = {}
    for key, tool_name, count in rows:
        tool = registry.get(tool_name)
        spent[key] = round(
            spent.get(key, 0.0) + count * (tool.spec.cost_per_call if tool else 0), 6
        )
    return spent
