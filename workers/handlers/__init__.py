"""Handler adapters: one module per kind of tool (Python callable; HTTP and MCP to come).

Each adapter turns one run into an ``Outcome`` and never raises.
"""

from __future__ import annotations

from typing import Any

from router.context import CallContext
from router.registry import Tool

from .outcome import Outcome
from .python import run_python


def invoke(tool: Tool, args: dict[str, Any], ctx: CallContext) -> Outcome:
    """Run ``tool``'s handler once, whatever its kind."""
    return run_python(tool, args, ctx)


__all__ = ["Outcome", "invoke"]
