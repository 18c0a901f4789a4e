"""How much of everything a run does: the full benchmark, or the smoke."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Params:
    throughput_calls: int = 3000
    # Each throughput figure is the median of this many runs: this machine is shared, and
    # a busy neighbour can slow any one run down.
    throughput_runs: int = 3
    batch_calls: int = 10_000
    # The batch figure is the median of this many batches, each worked off before the next.
    batch_runs: int = 3
    latency_samples: int = 500
    approval_samples: int = 200
    # Starts of each timed CLI command.
    cli_runs: int = 10
    audit_rows: int = 1_000_000
    warmup: int = 100
    # Worker pool processes, the same for Celery and toolrouter.
    concurrency: int = 2
    # Calls in flight from the Python client during the throughput runs.
    in_flight: int = 64
    # API processes on the API's port (TOOLROUTER_API_PROCESSES).
    api_processes: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL = Params()
SMOKE = Params(
    throughput_calls=200,
    throughput_runs=1,
    batch_runs=1,
    batch_calls=500,
    latency_samples=20,
    approval_samples=5,
    cli_runs=2,
    audit_rows=20_000,
    warmup=10,
)
