"""Handlers of the bench's tools (``bench/toolrouter.yaml``)."""

from __future__ import annotations

import time
from typing import Any


def noop(args: dict[str, Any], ctx: Any) -> Any:
    return args.get("i", 0)


def stamp(args: dict[str, Any], ctx: Any) -> Any:
    """Records when the handler started (wall clock, seconds), for approval-to-start."""
    return {"started": time.time()}
