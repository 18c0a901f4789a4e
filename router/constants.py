"""Every queue name, task name and Redis key name the processes share.

Kept in one module (as arq does in ``arq/constants.py``) so that the core, the workers
and the approval worker can never disagree about a name. In Redis every one of them is
prefixed with the deployment's namespace (``router.messaging.namespace``).
"""

from __future__ import annotations

RISK_LEVELS: tuple[str, ...] = ("low", "medium", "high")

QUEUE_PREFIX = "tools."
APPROVALS_QUEUE = "approvals"
# Beat's housekeeping (reaper, reconciler, expiry); served by the approval worker, so a
# backlog on a tool queue never delays recovery.
MAINTENANCE_QUEUE = "maintenance"
# Notifications to approvers (router.notify); served by a worker of their own, so a slow
# receiver never holds up a call or a decision.
NOTIFICATIONS_QUEUE = "notifications"
TOOL_QUEUES: tuple[str, ...] = tuple(QUEUE_PREFIX + risk for risk in RISK_LEVELS)
ALL_QUEUES: tuple[str, ...] = (
    *TOOL_QUEUES,
    APPROVALS_QUEUE,
    MAINTENANCE_QUEUE,
    NOTIFICATIONS_QUEUE,
)

# The tool toolrouter's own MCP server offers beside the registry's: no tool may take its name.
MCP_STATUS_TOOL = "toolrouter.call_status"

# Celery task names: the core publishes by name and never imports a task.
RUN_CALL_TASK = "toolrouter.run_call"
DECIDE_TASK = "toolrouter.decide"
REAP_TASK = "toolrouter.reap_lost_runs"
RECONCILE_TASK = "toolrouter.reconcile_queued"
EXPIRE_TASK = "toolrouter.expire_requests"
SIGN_AUDIT_HEAD_TASK = "toolrouter.sign_audit_head"
# A request's event (pending, decided, expired) fanned out to its channels, one delivery each.
NOTIFY_TASK = "toolrouter.notify"
DELIVER_TASK = "toolrouter.deliver_notification"
# Beat's sweep for requests undecided past their tool's escalate_after_s (router.notify.escalation).
ESCALATE_TASK = "toolrouter.escalate_requests"
# Beat's sweep for deliveries whose message was lost or whose attempt died with its process.
RESEND_TASK = "toolrouter.resend_notifications"

# Names in Redis, each under the namespace's prefix (``Namespace.key``).
# The approval worker pushes its answer to a decision onto this list (+ decision id).
DECISION_REPLY = "decision-reply"
# Pub/sub channel on which workers announce a finished call.
CALL_DONE_CHANNEL = "call-done"
# Pub/sub channel on which a key's revocation is announced, so API processes drop the
# principals they keep (``router.auth.key_cache``); and the lists their answers go to.
KEYS_CHANGED_CHANNEL = "keys-changed"
KEYS_ACK = "keys-ack"
# Rate limits' token buckets and cached results, by tool.
RATE_BUCKET = "bucket"
RESULT_CACHE = "cache"
# Failed inbox sign-ins, by client address.
LOGIN_FAILURES = "login-failures"
# MCP over stateless HTTP: the call each waiting request made (for cancels), and the log
# level each key set.
MCP_IN_FLIGHT = "mcp-in-flight"
MCP_LOG_LEVEL = "mcp-log-level"

# A call whose run has taken its worker down this many times is failed as poison.
POISON_CAP = 3


def queue_for(risk: str) -> str:
    """The Celery queue that serves tools of this risk level."""
    return QUEUE_PREFIX + risk


# Candidates a route answers with unless asked for more or fewer (the API and the CLI).
ROUTE_LIMIT = 10
