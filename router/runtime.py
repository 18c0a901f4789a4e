"""Wiring: builds the store, registry, publisher and services from one ``Settings``.

Every process (API, workers, approval worker, CLI) starts from here, so all of them see
the same database, the same broker and the same tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from celery import Celery
from sqlalchemy import Engine

from .approval.view import ApprovalsView
from .audit.deployment import (
    Deployment,
    adopt,
    check_key,
    moved_namespace_told,
    record_file,
    register,
    remember,
)
from .audit.deployment import read as read_deployment
from .audit.head import head_file
from .audit.head import read as read_head
from .audit.log import AuditLog
from .audit.verify import Evidence, Report, verify
from .auth.key_cache import Acknowledged, PrincipalCache
from .auth.keys import KeyStore
from .auth.sessions import SessionStore
from .clock import Clock, wall_clock_ms
from .db.engine import make_engine
from .db.migrate import ensure_schema
from .db.store import Store
from .dispatch.calls import CallService
from .dispatch.dispatcher import Dispatcher
from .dispatch.explain import Explainer
from .dispatch.group_commit import GroupCommit
from .errors import ConfigError
from .messaging.celery_app import make_celery, resolve_redis_url
from .messaging.completions import CompletionListener, Notifier
from .messaging.decisions import DecisionClient
from .messaging.namespace import Namespace
from .messaging.policies import Limiter, ResultCache
from .messaging.publisher import Publisher
from .messaging.redis_clients import redis_client
from .notify import escalation
from .notify.announce import Announcer
from .notify.courier import Courier
from .settings import Settings
from .tools.config import PYTHON_CALLS_PER_MESSAGE, ToolConfig, load_config
from .tools.mcp_client import ANSWER_BYTES_PER_RESULT_BYTE, McpConnections, parse_servers
from .tools.ranking import Ranker
from .tools.registry import ToolRegistry, import_handlers_from
from .tools.selection.candidates import Strategy
from .tools.selection.llm import LlmEndpoint, LlmSelector
from .trust.keyring import (
    KeyRing,
    existing_keyring,
    key_file,
    load_keyring,
)
from .trust.redaction import Redactor, redact_logs


@dataclass
class Runtime:
    """The long-lived objects of one process, built lazily from ``settings``."""

    settings: Settings
    clock: Clock = field(default=wall_clock_ms)
    # The processes that split one pool of database connections (the API's on one port).
    pool_share: int = 1

    @cached_property
    def redis_url(self) -> str:
        return resolve_redis_url(self.settings)

    @cached_property
    def namespace(self) -> Namespace:
        return Namespace.of(self.settings)

    @cached_property
    def _loaded_keyring(self) -> KeyRing:
        """The deployment's key as configured, not yet checked against the database's."""
        return load_keyring(self.settings, self.namespace.name)

    @cached_property
    def _trust(self) -> tuple[KeyRing, Deployment]:
        keyring = self._loaded_keyring
        with moved_namespace_told(self.settings, self.namespace.name):
            found = register(self.store, keyring, self.clock)
        # Outside the database: a sign ``adopt_key`` reads if the row is ever deleted.
        remember(record_file(self.settings, self.namespace.name), found)
        return keyring, found

    @property
    def keyring(self) -> KeyRing:
        """The deployment's key, checked against the one the database was set up with."""
        return self._trust[0]

    @property
    def deployment(self) -> Deployment:
        return self._trust[1]

    @cached_property
    def audit(self) -> AuditLog:
        """The audit chain's one writer in this process."""
        return AuditLog(self.keyring, keyed_from_seq=self.deployment.keyed_from_seq)

    @cached_property
    def engine(self) -> Engine:
        return make_engine(self.settings.resolved_database_url, share=self.pool_share)

    @cached_property
    def store(self) -> Store:
        return Store(self.engine)

    @cached_property
    def tool_config(self) -> ToolConfig:
        config = load_config(self.settings.config, required=self.settings.config_given)
        if self.settings.config.is_file():
            import_handlers_from(self.settings.config.resolve().parent)
        # From here on nothing this process logs carries a ${VAR} secret's value.
        redact_logs(config.redactor)
        return config

    @property
    def redactor(self) -> Redactor:
        return self.tool_config.redactor

    @cached_property
    def mcp(self) -> McpConnections:
        """Sessions to the configured MCP servers, opened on first use and kept."""
        return McpConnections(
            parse_servers(self.tool_config.mcp_servers, file=str(self.settings.config)),
            log_dir=self.settings.logs_dir,
            max_answer_bytes=ANSWER_BYTES_PER_RESULT_BYTE * self.settings.max_result_bytes,
            redact=self.redactor,
        )

    @cached_property
    def ranker(self) -> Ranker:
        settings = self.settings
        llm = None
        if settings.route_llm_url:
            llm = LlmSelector(
                LlmEndpoint(
                    url=settings.route_llm_url,
                    key=settings.route_llm_key.get_secret_value(),
                    model=settings.route_llm_model,
                    timeout_s=settings.route_llm_timeout_s,
                    concurrency=settings.route_llm_concurrency,
                )
            )
        return Ranker(
            self.store,
            self.registry,
            self.tool_config.routing.rules,
            default=Strategy(settings.route_strategy),
            llm=llm,
            shortlist=settings.route_llm_shortlist,
            clock=self.clock,
        )

    @cached_property
    def registry(self) -> ToolRegistry:
        return ToolRegistry.from_config(
            self.tool_config, file=str(self.settings.config), mcp=self.mcp
        )

    @cached_property
    def celery(self) -> Celery:
        return make_celery(self.redis_url, self.namespace)

    @cached_property
    def publisher(self) -> Publisher:
        # A group of calls is spread over at least as many messages as a worker has pool
        # processes, so that they run side by side.
        return Publisher(self.celery, spread=self.settings.worker_concurrency)

    @cached_property
    def dispatcher(self) -> Dispatcher:
        return Dispatcher(
            self.store,
            self.registry,
            self.publisher,
            self.audit,
            self.keyring,
            clock=self.clock,
            max_args_bytes=self.settings.max_args_bytes,
            max_nesting=self.settings.max_nesting,
            announcer=self.announcer,
        )

    @cached_property
    def announcer(self) -> Announcer:
        """Queues notifications of requests to their approvers, after commit."""
        return Announcer(self.celery, self.tool_config.notifications, self.registry)

    @cached_property
    def courier(self) -> Courier:
        """Plans and attempts those notifications (the notification worker's)."""
        return Courier(
            self.store,
            self.tool_config.notifications,
            self.registry,
            self.settings,
            self.redactor,
            clock=self.clock,
        )

    @cached_property
    def explainer(self) -> Explainer:
        """Dry runs: the dispatcher's checks, and the rate limits and cache asked read-only."""
        client = redis_client(self.redis_url, socket_timeout=2, socket_connect_timeout=2)
        return Explainer(
            self.dispatcher,
            Limiter(client, self.namespace),
            ResultCache(client, self.namespace, self.keyring, clock=self.clock),
            self.namespace,
        )

    @cached_property
    def group_commit(self) -> GroupCommit:
        """The process's one queue of submissions (HTTP and MCP) that share transactions."""
        return GroupCommit(
            lambda: self.dispatcher,
            hold_s=self.settings.group_hold_ms / 1000,
            # A full group fills a message for each of a worker's pool processes; a group is
            # held while each has a call to run and one more waiting.
            full=self.settings.worker_concurrency * PYTHON_CALLS_PER_MESSAGE,
            busy=self.settings.worker_concurrency * 2,
            heard=lambda call_id: self.listener.heard_recently(call_id),
        )

    @cached_property
    def key_cache(self) -> PrincipalCache:
        """Keys this process knows; in use only while ``listener`` can hear revocations."""
        return PrincipalCache()

    @cached_property
    def listener(self) -> CompletionListener:
        """The process's one subscription to completions and key revocations (started by
        the API and the stdio MCP server; idle elsewhere)."""
        return CompletionListener(
            self.redis_url,
            self.namespace,
            self.keyring,
            key_cache=self.key_cache,
            on_completion=lambda call_id: self.group_commit.in_flight.finished(call_id),
        )

    @cached_property
    def decisions(self) -> DecisionClient:
        return DecisionClient(
            self.celery,
            self.redis_url,
            self.namespace,
            self.keyring,
            clock=self.clock,
            timeout_s=self.settings.decision_timeout_s,
            applied=self.approvals_view.applied,
        )

    @cached_property
    def calls(self) -> CallService:
        return CallService(self.store, self.decisions, self.audit, clock=self.clock)

    @cached_property
    def sessions(self) -> SessionStore:
        return SessionStore(self.store, self.keyring, self.clock)

    @cached_property
    def approvals_view(self) -> ApprovalsView:
        groups = {t.name: t.escalate_to for t in self.tool_config.tools if t.escalate_to}
        return ApprovalsView(
            self.store,
            self.keyring,
            escalations_of=escalation.recorded,
            clock=self.clock,
            escalate_to=groups,
        )

    @cached_property
    def keys(self) -> KeyStore:
        return KeyStore(
            self.store,
            self.keyring,
            clock=self.clock,
            announce=self._announce_keys_changed,
            cache=self.key_cache,
        )

    def notifier(self) -> Notifier:
        """A new notifier (each process keeps its own: workers' are made after the fork)."""
        return Notifier(self.redis_url, self.namespace, self.keyring)

    def _announce_keys_changed(self) -> Acknowledged:
        """Told after the change is committed: whatever stops the telling (a Redis URL no
        client takes, say) is how the change was heard, never an error of the change."""
        try:
            notifier = self.notifier()
        except Exception:
            return Acknowledged(listening=None, heard=0)  # the caller says it was not told
        try:
            return notifier.keys_changed()
        finally:
            notifier.client.close()

    @property
    def archive_dir(self) -> Path:
        return self.settings.state_dir / "audit-archive"

    def verify_audit(self) -> Report:
        """Everything that shows the audit log was changed (``router.audit.verify``). The
        deployment row is read, never written: one missing is reported, not re-created."""
        keyring = self._loaded_keyring
        namespace = self.namespace.name
        head_path = head_file(self.settings, namespace)
        evidence = Evidence(
            keyring=keyring,
            namespace=namespace,
            head_path=head_path,
            head=read_head(head_path),  # before the snapshot below: see ``Evidence``
            archive_dir=self.archive_dir,
            now=self.clock(),
            archive_days=self.settings.audit_archive_days,
        )
        found = read_deployment(self.store)
        if found is not None:
            with moved_namespace_told(self.settings, self.namespace.name):
                check_key(found, keyring)
        with self.store.reading(snapshot=True) as conn:
            return verify(conn, found, evidence)

    def adopt_key(self) -> Deployment:
        """Record that this database's audit log so far was written before the deployment
        had its key (``toolrouter audit adopt-key``)."""
        namespace = self.namespace.name
        # Never a key made now: the database would be sealed to it, and refuse the real one.
        keyring = existing_keyring(self.settings, namespace)
        if keyring is None:
            raise ConfigError(
                f"no secret key for this deployment (TOOLROUTER_SECRET_KEY, or "
                f"{key_file(self.settings, namespace)}): run this where its processes run"
            )
        head = read_head(head_file(self.settings, namespace))
        recorded = record_file(self.settings, namespace)
        return adopt(self.store, keyring, self.clock, head=head, recorded=recorded)

    def prepare(
        self, *, check_tools: bool = True, runs_tools: bool = False, trust: bool = True
    ) -> None:
        """Fail fast at start-up: load the tools and check (or, on SQLite, upgrade) the schema.
        ``runs_tools``: this process runs tools (a tool worker's pool process), so the MCP
        servers their specs were read from stay up for its calls; any other process reads
        only the specs, and stops the servers it started to list them."""
        if check_tools:
            # Every tool is built now, so a bad tool config stops the start-up.
            _ = self.registry
            if not runs_tools:
                self.mcp.close()
        # With the key, so an upgrade seals the rows it has to (checked against the
        # database's key before it does).
        ensure_schema(self.engine, self._loaded_keyring)
        if trust:
            # The key, checked against the database's: a wrong key stops the start-up too.
            _ = self.keyring

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
        if "engine" in self.__dict__:
            self.engine.dispose()
        if "mcp" in self.__dict__:
            self.mcp.close()
        if "ranker" in self.__dict__:
            self.ranker.close()
        if "publisher" in self.__dict__:
            self.publisher.close()
