"""Execution policies (SPEC §10) around one run: retry backoff, shared rate limits, caching.

Each is a small function of the tool's spec and Redis; the executor decides when to apply
them, so the order of a run stays readable in one place (``workers.execution``).
"""

from __future__ import annotations

import random

from router.messaging.policies import Limiter, ResultCache
from router.tools.registry import Tool

from .handlers import Outcome

# Rate limits and the result cache live in ``router.messaging.policies``, beside the dry
# run that explains them from the API; re-exported here, where a run applies them.
__all__ = ["Limiter", "ResultCache", "backoff_s", "should_retry"]


def backoff_s(tool: Tool, attempt: int, outcome: Outcome) -> float:
    """Exponential backoff with full jitter, capped; a service's Retry-After wins if longer."""
    policy = tool.spec.retry
    ceiling = min(policy.max_backoff_s, policy.backoff_s * (2 ** max(0, attempt - 1)))
    delay = random.uniform(ceiling / 2, ceiling)
    if outcome.retry_after_s is not None:
        delay = max(delay, outcome.retry_after_s)
    return delay


def should_retry(tool: Tool, attempt: int, outcome: Outcome) -> bool:
    return (not outcome.ok) and outcome.retryable and attempt < tool.spec.retry.max_attempts
