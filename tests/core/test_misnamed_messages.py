"""A run message names its call's tool, and that tool's limits (time, lease, rate) are the
ones the worker applies before it reads the call. Redis is not trusted (SPEC §16): a
message naming another tool, or none, must not run the call under that tool's limits, nor
spend one of its attempts.

Real databases and real Redis, no Celery: ``Executor`` is what the task calls.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import redis

from router.runtime import Runtime
from router.status import CallStatus
from workers.execution import Executor

from ..support.calls import queue_call

LOW_QUEUE = "tools.low"


def queued_messages(runtime: Runtime, broker: redis.Redis) -> list[tuple[list[str], str]]:
    """(call ids, tool named) of each message on the low queue, oldest first."""
    pushed = broker.lrange(runtime.namespace.prefix + LOW_QUEUE, 0, -1)
    bodies = [json.loads(base64.b64decode(json.loads(raw)["body"])) for raw in pushed[::-1]]
    return [(list(args), kwargs["tool"]) for args, kwargs, _ in bodies]


def runs(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


@pytest.mark.parametrize("named", ["slow", None])
def test_a_message_naming_another_tool_puts_its_call_back_unrun(
    runtime: Runtime, executor: Executor, broker: redis.Redis, tmp_path: Path, named: str | None
) -> None:
    path = tmp_path / "ledger.txt"
    call_id = queue_call(runtime, "ledger", {"path": str(path)})

    assert executor.run(call_id, named) == "misnamed"

    assert runs(path) == 0
    row = runtime.calls.read(call_id)
    assert (row.status, row.attempt) == (CallStatus.QUEUED, 0)  # not claimed: no attempt spent
    # Sent again under its own tool's name, and that message runs it.
    assert queued_messages(runtime, broker)[-1] == ([call_id], "ledger")
    assert executor.run(call_id, "ledger") == "ok"
    assert runs(path) == 1


def test_a_shared_message_naming_another_tool_runs_none_of_its_calls(
    runtime: Runtime, executor: Executor, broker: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.txt"
    call_ids = [queue_call(runtime, "ledger", {"path": str(path), "n": n}) for n in range(3)]

    assert executor.run_many(call_ids, "slow") == ["misnamed"] * 3

    assert runs(path) == 0
    rows = [runtime.calls.read(call_id) for call_id in call_ids]
    assert [(row.status, row.attempt) for row in rows] == [(CallStatus.QUEUED, 0)] * 3
    assert queued_messages(runtime, broker)[-3:] == [([call_id], "ledger") for call_id in call_ids]
    assert executor.run_many(call_ids, "ledger") == ["ok"] * 3
    assert runs(path) == 3
