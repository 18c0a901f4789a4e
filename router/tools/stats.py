"""Per-tool statistics from the system of record: calls, success rate, latency, cost, errors.

Read from the ``calls`` table (the most recent finished calls per tool), so every API
process reports the same figures and nothing is lost when a process restarts.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.engine import Connection

from ..db.schema import calls
from ..status import CallStatus
from .registry import ToolRegistry

WINDOW = 1000


def _percentile(sorted_values: list[int], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index] / 1000


def tool_stats(conn: Connection, registry: ToolRegistry, name: str) -> dict[str, Any]:
    """Counts over all calls of ``name``; latency and errors over its last ``WINDOW``."""
    tool = registry.get(name)
    rows = conn.execute(
        select(calls.c.status, func.count()).where(calls.c.tool == name).group_by(calls.c.status)
    ).all()
    by_status: dict[str, int] = {str(status): int(count) for status, count in rows}
    recent = conn.execute(
        select(calls.c.status, calls.c.started_at, calls.c.finished_at, calls.c.error_type)
        .where(
            and_(
                calls.c.tool == name,
                calls.c.finished_at.is_not(None),
                calls.c.started_at.is_not(None),
            )
        )
        .order_by(calls.c.finished_at.desc())
        .limit(WINDOW)
    ).all()
    latencies = sorted(row.finished_at - row.started_at for row in recent)
    errors: dict[str, int] = {}
    for row in recent:
        if row.status != CallStatus.SUCCEEDED and row.error_type:
            errors[row.error_type] = errors.get(row.error_type, 0) + 1
    succeeded = by_status.get(CallStatus.SUCCEEDED, 0)
    failed = by_status.get(CallStatus.FAILED, 0) + by_status.get(CallStatus.INTERRUPTED, 0)
    ran = succeeded + failed
    cost = tool.spec.cost_per_call if tool else 0.0
    return {
        "tool": name,
        "calls": sum(by_status.values()),
        "by_status": by_status,
        "success_rate": round(succeeded / ran, 4) if ran else None,
        "latency_p50_s": _percentile(latencies, 0.50),
        "latency_p95_s": _percentile(latencies, 0.95),
        "cost": round(ran * cost, 6),
        "errors_by_type": errors,
    }


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
