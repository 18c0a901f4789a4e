"""The capacity model's arithmetic (``bench.capacity``), on made-up measurements."""

from __future__ import annotations

import pytest

from bench.capacity import plan, predict

MEASURED = {
    "backend": "postgresql",
    "cores": 2,
    "runs": {
        "2": {
            "t_pool_ms": 2.0,
            "redis_commands_per_call": 1.5,
            "cpu_ms_per_call": {"client": 0.2, "api": 0.4, "worker": 0.6, "database": 0.3},
        }
    },
}


def test_the_rate_is_the_smaller_of_the_pools_and_the_cores_bound() -> None:
    run = MEASURED["runs"]["2"]
    # 2 processes of 2 ms: 1,000 calls/s; 2 cores at 1.5 ms of CPU a call: 1,333 calls/s.
    assert predict(run, 2, 2) == {"by_pool": 1000.0, "by_cpu": 1333.3, "rate": 1000.0}
    assert predict(run, 4, 2)["rate"] == pytest.approx(2 * 1000 / 1.5)


def test_a_plan_sizes_each_resource_at_its_headroom() -> None:
    lines = "\n".join(plan(3000, MEASURED, 0.5))
    # 3,000 calls/s x 0.4 ms = 1.2 cores of API, at 50 %: 2.4, so 3 processes.
    assert "API processes (one core each): 3" in lines
    # 3,000 x 2 ms = 6 pool processes busy, at 50 %: 12.
    assert "worker pool processes: 12" in lines
    assert "worker cores: 3.6" in lines
    assert "Redis: 4,500 commands/s" in lines
    assert "PostgreSQL: 1.8 cores" in lines
