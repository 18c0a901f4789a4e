"""Every queue name, task name and Redis key prefix the processes share.

Kept in one module (as arq does in ``arq/constants.py``) so that the core, the workers
and the approval worker can never disagree about a name.
"""

from __future__ import annotations

RISK_LEVELS: tuple[str, ...] = ("low", "medium", "high")

QUEUE_PREFIX = "tools."
APPROVALS_QUEUE = "approvals"
# Beat's housekeeping (reaper, reconciler, expiry); served by the approval worker, so a
# backlog on a tool queue never delays recovery.
MAINTENANCE_QUEUE = "maintenance"
TOOL_QUEUES: tuple[str, ...] = tuple(QUEUE_PREFIX + risk for risk in RISK_LEVELS)
ALL_QUEUES: tuple[str, ...] = (*TOOL_QUEUES, APPROVALS_QUEUE, MAINTENANCE_QUEUE)

# Celery task names: the core publishes by name and never imports a task.
RUN_CALL_TASK = "toolrouter.run_call"
DECIDE_TASK = "toolrouter.decide"
REAP_TASK = "toolrouter.reap_lost_runs"
RECONCILE_TASK = "toolrouter.reconcile_queued"
EXPIRE_TASK = "toolrouter.expire_requests"

# The approval worker pushes its answer to a decision onto this list (+ decision id).
DECISION_REPLY_PREFIX = "toolrouter:decision-reply:"

# Redis pub/sub channel on which workers announce a finished call (payload: call id).
CALL_DONE_CHANNEL = "toolrouter:call-done"
# Pub/sub channel on which a key's revocation is announced, so API processes drop the
# principals they keep (``router.key_cache``).
KEYS_CHANGED_CHANNEL = "toolrouter:keys-changed"

# A call whose run has taken its worker down this many times is failed as poison.
POISON_CAP = 3


def queue_for(risk: str) -> str:
    """The Celery queue that serves tools of this risk level."""
    return QUEUE_PREFIX + risk
