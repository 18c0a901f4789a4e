"""Handlers of the tools in ``tests/tools.yaml``: each misbehaves in one precise way."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from router import CallContext, RetryableError


def echo(args: dict[str, Any], ctx: CallContext) -> Any:
    return args


def value(args: dict[str, Any], ctx: CallContext) -> Any:
    """Return exactly ``args["value"]``: 0, False, None, "", [] and {} included."""
    return args["value"]


def sized(args: dict[str, Any], ctx: CallContext) -> Any:
    """A string of ``args["bytes"]`` characters: results of any size from small arguments."""
    return "x" * args["bytes"]


def context(args: dict[str, Any], ctx: CallContext) -> Any:
    return {
        "call_id": ctx.call_id,
        "idempotency_key": ctx.idempotency_key,
        "attempt": ctx.attempt,
        "requested_by": ctx.requested_by,
        "tool": ctx.tool,
    }


def raise_value_error(args: dict[str, Any], ctx: CallContext) -> Any:
    raise ValueError(args.get("message", "insufficient funds"))


def raise_long_named(args: dict[str, Any], ctx: CallContext) -> Any:
    """An exception whose class name is longer than any column keeps."""
    raise type("E" * 300, (Exception,), {})("a long-named failure")


def raise_key_error(args: dict[str, Any], ctx: CallContext) -> Any:
    return {}["missing_key"]


def raise_empty(args: dict[str, Any], ctx: CallContext) -> Any:
    raise RuntimeError()


class Unprintable(Exception):
    def __str__(self) -> str:
        raise SystemExit("no words for it")


def raise_unprintable(args: dict[str, Any], ctx: CallContext) -> Any:
    """An exception whose message cannot be made."""
    raise Unprintable("a message nobody can read")


class Impatient(Exception):
    @property
    def retry_after_s(self) -> float:
        raise SystemExit("no wait for it")


def raise_impatient(args: dict[str, Any], ctx: CallContext) -> Any:
    """An exception whose ``retry_after_s`` cannot be read."""
    raise Impatient("asks for no wait")


def raise_retryable_after_ever(args: dict[str, Any], ctx: CallContext) -> Any:
    """A retryable failure that asks for an endless wait."""
    raise RetryableError("try much later", retry_after_s=float("inf"))


def raise_system_exit(args: dict[str, Any], ctx: CallContext) -> Any:
    raise SystemExit(3)


def raise_keyboard_interrupt(args: dict[str, Any], ctx: CallContext) -> Any:
    raise KeyboardInterrupt


def raise_retryable(args: dict[str, Any], ctx: CallContext) -> Any:
    raise RetryableError("try later")


def not_json(args: dict[str, Any], ctx: CallContext) -> Any:
    return {"when": object()}


def nan(args: dict[str, Any], ctx: CallContext) -> Any:
    return float("nan")


def sleep(args: dict[str, Any], ctx: CallContext) -> Any:
    time.sleep(float(args.get("seconds", 1)))
    return args.get("seconds", 1)


def stubborn_sleep(args: dict[str, Any], ctx: CallContext) -> Any:
    """Swallows the soft time limit, so only the hard limit stops it."""
    deadline = time.monotonic() + float(args.get("seconds", 30))
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except BaseException:  # the point of this tool
            pass
    return "finished"


def ledger(args: dict[str, Any], ctx: CallContext) -> Any:
    """Append one line per run to ``args["path"]``: the test counts runs from the file."""
    with Path(args["path"]).open("a", encoding="utf-8") as handle:
        handle.write(f"{ctx.call_id} {ctx.attempt} {os.getpid()}\n")
        handle.flush()
        os.fsync(handle.fileno())
    if args.get("kill_on_attempt") == ctx.attempt:
        os.kill(os.getpid(), signal.SIGKILL)  # after its run, before its outcome is recorded
    if args.get("sleep"):
        time.sleep(float(args["sleep"]))
    if args.get("until"):
        # After its run, until the test releases it: run N waits for the file ``until.N``.
        runs = Path(args["path"]).read_text(encoding="utf-8").count("\n")
        hold({"until": f"{args['until']}.{runs}"}, ctx)
    return {"pid": os.getpid()}


def kill_worker(args: dict[str, Any], ctx: CallContext) -> Any:
    """Take the pool process down, as a segfaulting extension would."""
    with Path(args["path"]).open("a", encoding="utf-8") as handle:
        handle.write(f"{ctx.call_id} {ctx.attempt}\n")
    os.kill(os.getpid(), signal.SIGKILL)
    return None


def flaky(args: dict[str, Any], ctx: CallContext) -> Any:
    """Fails retryably until attempt ``args["succeed_on"]`` (never, by default)."""
    if ctx.attempt >= int(args.get("succeed_on", 10**9)):
        return {"attempt": ctx.attempt}
    raise RetryableError(f"flaky on attempt {ctx.attempt}", retry_after_s=args.get("retry_after_s"))


def deep(args: dict[str, Any], ctx: CallContext) -> Any:
    """A value nested ``args["depth"]`` levels deep (``[[...[1]...]]``), built without recursion."""
    value: Any = 1
    for _ in range(int(args["depth"])):
        value = [value]
    return value


def hold(args: dict[str, Any], ctx: CallContext) -> Any:
    """Runs until the file ``args["until"]`` exists: the test decides when it finishes."""
    release = Path(args["until"])
    deadline = time.monotonic() + float(args.get("at_most_s", 120))
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"released": release.exists()}
