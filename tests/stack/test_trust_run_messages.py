"""Run messages from Redis (SPEC §16: not trusted) that no API process sends: ones that
name no call. The worker runs nothing of them, says so in one log line, no traceback, and
counts them; the next real call runs as ever."""

from __future__ import annotations

import time
from typing import Any

from router.constants import RUN_CALL_TASK

from ..support.redis_attacker import attacker_celery, submit, untrusted
from ..support.stack import Stack

IGNORED = "ignored a run message that names no call"
# What someone holding Redis might push onto a tool queue: (call ids, tool).
MALFORMED: list[tuple[list[Any], Any]] = [
    ([], "echo"),
    ([None], "echo"),
    ([{"a": 1}], "echo"),
    (["x" * 100_000], "echo"),
    (["call_" + "0" * 32], {"not": "a tool name"}),
]


def test_run_messages_naming_no_call_run_nothing_and_leave_no_traceback(stack: Stack) -> None:
    counted_before = untrusted(stack, "run_message")
    logged_before = stack.log("worker").count(IGNORED)
    tracebacks_before = stack.log("worker").count("Traceback")

    with attacker_celery(stack) as app:
        for call_ids, tool in MALFORMED:
            app.send_task(
                RUN_CALL_TASK,
                args=call_ids,
                kwargs={"tool": tool},
                queue="tools.low",
                routing_key="tools.low",
            )
    deadline = time.monotonic() + 60
    while stack.log("worker").count(IGNORED) < logged_before + len(MALFORMED):
        assert time.monotonic() < deadline, stack.log("worker")[-2000:]
        time.sleep(0.1)

    assert untrusted(stack, "run_message") == counted_before + len(MALFORMED)
    assert stack.log("worker").count("Traceback") == tracebacks_before
    done = submit(stack, "echo", {"after": "malformed"}, wait_s=30)
    assert (done["status"], done["value"]) == ("succeeded", {"after": "malformed"}), done
