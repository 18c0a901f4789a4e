"""Handlers of the built-in example tools (``example_tools.yaml``)."""

from __future__ import annotations

import time
from typing import Any

from ..context import CallContext


def echo(args: dict[str, Any], ctx: CallContext) -> Any:
    return args


def add(args: dict[str, Any], ctx: CallContext) -> Any:
    return args["a"] + args["b"]


def sleep(args: dict[str, Any], ctx: CallContext) -> Any:
    time.sleep(float(args["seconds"]))
    return args["seconds"]


def fail(args: dict[str, Any], ctx: CallContext) -> Any:
    raise RuntimeError(args.get("message", "demo failure"))


def wire(args: dict[str, Any], ctx: CallContext) -> Any:
    # A real handler would pass ctx.idempotency_key to the payment system.
    return {"sent": args["amount"], "to": args["to"], "reference": ctx.idempotency_key}
