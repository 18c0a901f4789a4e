"""Python callable handlers: ``def handler(args: dict, ctx) -> JSON value``."""

from __future__ import annotations

from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from router.context import CallContext
from router.errors import RetryableError
from router.tools.registry import Tool

from .outcome import Outcome


def run_python(
    tool: Tool,
    args: dict[str, Any],
    ctx: CallContext,
    *,
    max_nesting: int,
    max_bytes: int | None = None,
) -> Outcome:
    handler = tool.python_handler
    assert handler is not None, "registry resolves python handlers at start-up"
    try:
        value = handler(args, ctx)
    except SoftTimeLimitExceeded:
        return Outcome.timed_out(tool.spec.timeout_s)
    except RetryableError as exc:
        return Outcome.of_exception(exc, retryable=True)
    # BaseException on purpose: a handler's SystemExit or KeyboardInterrupt fails its call,
    # it does not take the worker down.
    except BaseException as exc:
        return Outcome.of_exception(exc)
    return Outcome.of_value(value, max_nesting=max_nesting, max_bytes=max_bytes)
