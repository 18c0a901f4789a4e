"""The tables, in SQLAlchemy Core. Alembic migrations create them; this is their mirror.

Timestamps are integers (ms since the epoch, from the injected clock), JSON is stored
as canonical text, so SQLite and PostgreSQL hold byte-identical rows.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

calls = Table(
    "calls",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("tool", String(64), nullable=False),
    Column("risk", String(8), nullable=False),
    Column("args", Text, nullable=False),
    Column("args_sha256", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("requested_by", String(128), nullable=False),
    Column("idempotency_key", String(256), nullable=True),
    # Number of claims so far; completion is fenced on it.
    Column("attempt", Integer, nullable=False, default=0),
    Column("lease_until", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("published_at", BigInteger, nullable=True),
    Column("started_at", BigInteger, nullable=True),
    Column("finished_at", BigInteger, nullable=True),
    Column("value", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("error_type", String(128), nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("batch_id", String(40), nullable=True),
    # The call's place in its batch (migration 0003): results come back in this order.
    Column("batch_index", BigInteger, nullable=True),
    # The tool that answered, when a fallback did (migration 0004).
    Column("answered_by", String(64), nullable=True),
    # JSON list of tools to fall back along, for calls by capability (migration 0004).
    Column("chain", Text, nullable=True),
    # JSON list of an MCP tool's content blocks, when ``value`` cannot carry them all
    # (migration 0008).
    Column("content", Text, nullable=True),
    # Set when an approver edited the arguments (migration 0012): the requester's own.
    Column("original_args", Text, nullable=True),
    Column("original_args_sha256", String(64), nullable=True),
    Column("edited_by", String(128), nullable=True),
    # 1 when the answer came from the tool's cache (migration 0018): no run, no cost. An
    # integer, not a boolean: the outcome's statement then binds it unconverted.
    Column("cached", Integer, nullable=True),
    UniqueConstraint("requested_by", "idempotency_key", name="uq_calls_requested_by_idem"),
    Index("ix_calls_status_lease", "status", "lease_until"),
    # One call at each index of a batch (migration 0013).
    Index("uq_calls_batch_id_index", "batch_id", "batch_index", unique=True),
)

audit_log = Table(
    "audit_log",
    metadata,
    # Assigned by the writer under the chain lock, never by a sequence: the hash covers it.
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("at", BigInteger, nullable=False),
    Column("tool", String(256), nullable=True),
    Column("event", String(16), nullable=False),
    Column("call_id", String(40), nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("actor", String(128), nullable=False),
    Column("detail", Text, nullable=True),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index("ix_audit_log_call_id", "call_id"),
    Index("ix_audit_log_tool_seq", "tool", "seq"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("name", String(128), primary_key=True),
    # SHA-256 of the token; the token itself is never stored.
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("roles", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("revoked_at", BigInteger, nullable=True),
    # Tag of the row with the secret key (migration 0016): a row written without it, or
    # roles or a revocation changed in the database, is no key.
    Column("seal", String(64), nullable=True),
)

# The pending table: one row per gated call, bound at issue time to the call, its tool,
# the SHA-256 of its arguments, the requester and the expiry.
approval_requests = Table(
    "approval_requests",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("call_id", String(40), nullable=False, unique=True),
    Column("tool", String(64), nullable=False),
    Column("args_sha256", String(64), nullable=False),
    Column("requested_by", String(128), nullable=False),
    Column("approvers", Text, nullable=False),
    Column("approvals_required", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("decided_at", BigInteger, nullable=True),
    # Tags made with the deployment's key (migration 0007): the binding above, sealed by
    # the API at issue; the release, sealed by the approval worker when approved.
    Column("binding_mac", String(64), nullable=True),
    Column("release_mac", String(64), nullable=True),
    # The rules that gated the call, as text, sealed with the binding (migration 0011).
    Column("rule", Text, nullable=True),
    # Set when an approver edited the arguments, sealed with the binding (migration 0012).
    Column("original_args_sha256", String(64), nullable=True),
    Column("edited_by", String(128), nullable=True),
    # How many edits were made (migration 0017): each edit's notification is its own.
    Column("edits", Integer, nullable=False, server_default=text("0")),
    Index("ix_approval_requests_status_expires", "status", "expires_at"),
    # Decided requests are listed most recently decided first (migration 0014).
    Index("ix_approval_requests_decided", "decided_at", "id"),
)

approval_decisions = Table(
    "approval_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("request_id", String(64), nullable=False),
    Column("approver", String(128), nullable=False),
    Column("decision", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Column("at", BigInteger, nullable=False),
    # Sealed by the approval worker: only decisions it recorded count.
    Column("mac", String(64), nullable=True),
    # N-of-M needs N *distinct* approvers.
    UniqueConstraint("request_id", "approver", name="uq_approval_decisions_request_approver"),
)

# Archival checkpoints: rows up to ``through_seq`` left the hot table for a segment file.
audit_checkpoints = Table(
    "audit_checkpoints",
    metadata,
    Column("through_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("last_hash", String(64), nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("segment", Text, nullable=False),
    Column("segment_sha256", String(64), nullable=False),
    Column("at", BigInteger, nullable=False),
    # Signed with the deployment's key: a forged checkpoint cannot cover deleted rows.
    Column("mac", String(64), nullable=True),
)

# The key this database was set up with (its fingerprint) and the first audit seq chained
# with it; one row, sealed (migration 0007).
deployment = Table(
    "deployment",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("key_fingerprint", String(64), nullable=False),
    Column("keyed_from_seq", BigInteger, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("mac", String(64), nullable=False),
)

# Inbox sessions: the cookie holds a random id; only its SHA-256 is stored.
ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("key_name", String(128), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    # Tag of the session id's hash and its key's name (migration 0016).
    Column("seal", String(64), nullable=True),
    Index("ix_ui_sessions_key_name", "key_name"),
)

# Batches (migration 0003): the calls point at their batch with ``calls.batch_id``.
batches = Table(
    "batches",
    metadata,
    Column("id", String(40), primary_key=True),
    # The submitting key owns the batch; operators read every batch.
    Column("requested_by", String(128), nullable=False),
    # Set when the submitter names the batch, so a re-run adds to the same batch.
    Column("idempotency_key", String(256), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # Calls received (accepted or not) over every submission; of them, the indexes
    # rejected, each counted once.
    Column("submitted", BigInteger, nullable=False, default=0),
    Column("rejected", BigInteger, nullable=False, default=0),
    # After the last index any request placed calls at (migration 0015): where a request
    # without an ``offset`` starts.
    Column("next_index", BigInteger, nullable=False, default=0),
    UniqueConstraint("requested_by", "idempotency_key", name="uq_batches_requested_by_idem"),
)

# The indexes of a named batch refused so far (migration 0019): a request sent again refuses
# them again, and ``batches.rejected`` counts each once.
batch_rejections = Table(
    "batch_rejections",
    metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("batch_index", BigInteger, primary_key=True),
)

# MCP tasks (migration 0009): a call made as a task-augmented ``tools/call``; the task's id
# is the call's id. Only listing needs the table; the call holds the state.
mcp_tasks = Table(
    "mcp_tasks",
    metadata,
    Column("task_id", String(40), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # How long after creation the task may be read (the TTL the client was granted).
    Column("ttl_ms", BigInteger, nullable=False),
    Index("ix_mcp_tasks_owner_created", "owner", "created_at"),
)

# Notifications to approvers (migration 0010): one row per request, event, channel and
# occurrence, so a repeated fan-out delivers nothing twice. No URL, address or secret is stored: the
# channel's name says where it went.
notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("request_id", String(64), nullable=False),
    Column("call_id", String(40), nullable=False),
    Column("tool", String(64), nullable=False),
    Column("event", String(16), nullable=False),
    Column("channel", String(64), nullable=False),
    Column("channel_type", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("next_attempt_at", BigInteger, nullable=True),
    Column("delivered_at", BigInteger, nullable=True),
    # Which telling of its event: 0 for an event that happens once, else the request's
    # edit it tells (migration 0017).
    Column("occurrence", BigInteger, nullable=False, server_default=text("0")),
    UniqueConstraint(
        "request_id", "event", "channel", "occurrence", name="uq_notification_deliveries_once"
    ),
    Index("ix_notification_deliveries_status_updated", "status", "updated_at"),
)
