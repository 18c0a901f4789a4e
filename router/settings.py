"""One typed settings object, read from ``TOOLROUTER_*`` environment variables.

Nothing else in the project reads ``os.environ`` for configuration.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Bind addresses meaning every interface: a server listens there, but nobody can open them.
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
# What a database URL may start with: SQLite, or PostgreSQL through psycopg 3 (the store's
# driver; `router.db.engine.normalize_url` gives the plain forms to it).
DATABASE_DIALECTS = frozenset({"sqlite", "postgresql", "postgres", "postgresql+psycopg"})
# Room in a call's body for what is not its arguments: the tool's name, keys, spacing.
CALL_ENVELOPE_BYTES = 16 * 1024
# Arguments are measured as UTF-8 by the dispatcher; a body may carry them escaped, up to
# six bytes a character (`\u00e9`, as Python's json.dumps writes by default).
ESCAPED_BYTES = 6


class Settings(BaseSettings):
    """Every knob of every process. Environment: ``TOOLROUTER_<FIELD>`` (upper case)."""

    model_config = SettingsConfigDict(env_prefix="TOOLROUTER_", extra="ignore")

    # Where the embedded defaults live: the SQLite file, a private Redis, logs (demo keys
    # are kept beside the secret key, in the secrets directory).
    state_dir: Path = Path(".toolrouter")
    # Empty: SQLite under the state directory. Else `sqlite:///<path>`, or
    # `postgresql://user:password@host/database` (`postgresql+psycopg://` alike): any other
    # form stops every command and process at start-up, named.
    database_url: str = ""
    # Empty: Redis on localhost if one answers, else `toolrouter up` starts a private one.
    # Else `redis://[:password@]host:port/<db>` (`rediss://`, `unix://` alike), or the
    # sentinels of a Redis Sentinel group, joined by `;`, as Celery takes them:
    # `sentinel://h1:26379;sentinel://h2:26379;sentinel://h3:26379/0`. Another scheme, a port
    # out of range or a database that is no number stops every command at start-up, named.
    redis_url: str = ""
    # For a `sentinel://` URL: the name of the primary the sentinels watch (required).
    redis_sentinel_master: str = ""
    # The tool config (YAML). Left unset, while `toolrouter.yaml` does not exist the
    # built-in example tools are served, so `toolrouter up` works out of the box; set, the
    # file it names must exist.
    config: Path = Path("toolrouter.yaml")

    # Address the API binds to: loopback, until you put it behind TLS or a private network.
    api_host: str = "127.0.0.1"
    # Port the API listens on.
    api_port: int = Field(default=8000, ge=1, le=65535)
    # API processes serving that port (uvicorn's workers, sharing its socket); 0: one per
    # two CPU cores (at most 8), leaving the rest to the workers and the database. Each is
    # a full API: any of them answers any request.
    api_processes: int = Field(default=0, ge=0, le=64)
    # The reverse proxies in front of the API whose `X-Forwarded-For` and
    # `X-Forwarded-Proto` are believed (addresses or networks, comma-separated; `*` for
    # any). Empty: none, so a client is the address it connects from, which is what the
    # inbox's sign-in throttle counts; a local client could otherwise name any address.
    trusted_proxies: str = ""
    # Address Flower binds to; loopback, since its pages show every task and worker.
    flower_host: str = "127.0.0.1"
    # Port Flower listens on.
    flower_port: int = Field(default=5555, ge=1, le=65535)
    # Flower's basic-auth user; no comma (Flower would check only the part before it).
    flower_user: str = "admin"
    # Flower's basic-auth password, no comma either; empty: one is generated on first use
    # and kept in the state directory (`toolrouter up` prints it).
    flower_password: str = ""
    # On Ctrl-C, how long `toolrouter up` lets running handlers finish before it kills
    # them (a second Ctrl-C kills at once); calls still queued stay queued either way.
    stop_grace_s: float = Field(default=30.0, ge=0)

    # Scopes every queue, channel and Redis key of this deployment; empty: derived from
    # the database's address, so two deployments on one Redis never mix.
    namespace: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,48}$")
    # The deployment's secret key (any string of 32 or more characters); empty: read from
    # ``<secrets_dir>/<namespace>/secret.key``, made there on first use.
    secret_key: SecretStr = SecretStr("")
    # Where key material and the signed audit head live: outside the state directory, so a
    # copy of the database and its directory carries neither.
    secrets_dir: Path = Path("~/.config/toolrouter")

    # How long an inbox session lasts before its approver signs in again.
    ui_session_hours: float = Field(default=8.0, gt=0, le=24 * 7)
    # Failed inbox sign-ins one client address may make in a minute (counted in Redis, shared
    # by every API process; per process while Redis is down) before it is answered 429:
    # guessing keys stays slow.
    ui_login_failures_per_minute: int = Field(default=5, ge=1, le=1000)

    # Host header values /mcp accepts besides localhost and the API's own host:port
    # (comma-separated; `name:*` for any port). Every other Host is refused (DNS rebinding).
    mcp_allowed_hosts: str = ""
    # How long an MCP tools/call waits for an ungated call before answering with its call id.
    mcp_call_wait_s: float = Field(default=30.0, ge=0, le=300)
    # How long an MCP task (a task-augmented tools/call) can be read after it was created;
    # a client asking for a shorter TTL gets its own.
    mcp_task_ttl_s: float = Field(default=7 * 24 * 3600.0, gt=0, le=365 * 24 * 3600)
    # The interval MCP clients are told to poll tasks/get at.
    mcp_task_poll_ms: int = Field(default=1000, ge=50, le=600_000)

    # Pool processes per worker. The API also spreads calls published together over at least
    # this many messages: with several workers on one queue, set it to their processes in all.
    worker_concurrency: int = Field(default=2, ge=1)
    # Longest an API process holds a small group of submissions back while the workers
    # already have two of its calls per pool process (router.dispatch.group_commit); 0: never.
    group_hold_ms: float = Field(default=10.0, ge=0, le=1000)
    # Messages a worker takes ahead, per pool process: 2 keeps the next call ready while
    # one runs, so a pool process does not wait on Redis between calls; 1 suits slow
    # tools served by several workers, where a call taken ahead waits behind a slow one.
    worker_prefetch: int = Field(default=2, ge=1, le=16)
    # Longest a pool process holds the outcome of a call of an idempotent tool in a shared
    # message, to commit it with the outcomes after it (workers.execution); 0: never.
    outcome_hold_ms: float = Field(default=5.0, ge=0, le=1000)
    # Deepest nesting of arrays and objects accepted in arguments and stored in results.
    max_nesting: int = Field(default=64, ge=2, le=512)
    # Largest result of a call, in bytes of its JSON (an HTTP tool's answer, as read): a
    # larger one fails the call (`result too large`), and an HTTP answer is not read past it.
    max_result_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # Largest arguments of a call, in bytes of their JSON (UTF-8): larger are refused with
    # 413 (`arguments too large`). A call's body may be six times this (arguments written
    # escaped) plus 16 KiB; a larger body is refused with 413 before it is parsed.
    max_args_bytes: int = Field(default=256 * 1024, ge=1024)
    # A batch takes at most this many calls; more are refused with 413.
    max_batch_calls: int = Field(default=100_000, ge=1)
    # Largest batch body, in bytes; a larger one is refused with 413 as soon as it passes.
    max_batch_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    # Longest `wait_s` a caller may ask for; longer is a 422, not a silent clamp.
    max_wait_s: float = Field(default=300.0, gt=0)
    # Added to a tool's timeout to form the lease on a running call.
    lease_grace_s: float = Field(default=15.0, ge=1)
    # A queued call with no claim, or a notification delivery unattempted this long after
    # it was due, is published again.
    requeue_after_s: float = Field(default=30.0, ge=1)
    # How long the API waits for the approval worker to decide; the decision message
    # expires with it, so a decision reported as failed is never applied later.
    decision_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # How often beat runs the expiry sweep, which moves approval requests past their expiry,
    # and their calls, to `expired`; and the escalation sweep (a tool's `escalate_after_s`).
    expiry_interval_s: float = Field(default=5.0, gt=0)
    # Audit retention: rows older than this leave the hot table for archive segments...
    audit_hot_days: float = Field(default=90.0, gt=0)
    # ...and archive segments older than this are deleted.
    audit_archive_days: float = Field(default=400.0, gt=0)
    # How often the approval worker exports the audit chain's signed head.
    audit_head_interval_s: float = Field(default=5.0, gt=0)
    # How often beat runs the reaper, which recovers running calls whose lease ran out
    # (their worker is gone).
    reaper_interval_s: float = Field(default=5.0, gt=0)
    # How often beat runs the reconcilers, which publish again the calls left `queued` and
    # the notification deliveries left unattempted longer than `TOOLROUTER_REQUEUE_AFTER_S`
    # (their message was lost).
    reconciler_interval_s: float = Field(default=10.0, gt=0)

    # The address approvers reach the API at, for the inbox links in notifications; empty:
    # the API's own `http://<api_host>:<api_port>`, or this host's name in place of an
    # `api_host` that binds every interface (`0.0.0.0`, `::`), which no browser can open.
    public_url: str = Field(default="", pattern=r"^(https?://\S+)?$")
    # Longest one notification attempt may take (connect, send, answer) before it counts
    # as failed and is retried; never more than half of `decision_timeout_s`, since a
    # decision still waits for an attempt to end where one worker serves both queues.
    notify_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # Pool processes of the notification worker: each mostly waits on a receiver, so more
    # than the cores, and a few receivers that hang leave the others served.
    notify_concurrency: int = Field(default=4, ge=1, le=64)
    # Attempts per notification, the first included, before its delivery is marked failed.
    notify_max_attempts: int = Field(default=5, ge=1, le=20)
    # Delay before a notification's first retry; it doubles with each retry.
    notify_backoff_s: float = Field(default=2.0, ge=0)
    # Largest delay between two attempts of a notification.
    notify_max_backoff_s: float = Field(default=300.0, ge=0)

    # The strategy `POST /v1/route` uses when a request names none, and the one the `llm`
    # strategy shortlists with and falls back to.
    route_strategy: Literal["hybrid", "lexical", "semantic"] = "hybrid"
    # An OpenAI-compatible chat completions endpoint for the `llm` strategy: its base URL
    # (the part before `/chat/completions`, such as `http://127.0.0.1:8080/v1`); empty: off.
    route_llm_url: str = Field(default="", pattern=r"^(https?://\S+)?$")
    # The bearer key sent to that endpoint; empty: none.
    route_llm_key: SecretStr = SecretStr("")
    # The model name sent with each request.
    route_llm_model: str = "gpt-4o-mini"
    # Longest the `llm` strategy waits for an answer before ranking by the default instead.
    route_llm_timeout_s: float = Field(default=10.0, gt=0, le=120)
    # Routes that may wait on the model at once, per API process; more fall back at once.
    route_llm_concurrency: int = Field(default=4, ge=1, le=64)
    # How many of the default ranking's best candidates the model chooses among.
    route_llm_shortlist: int = Field(default=20, ge=2, le=100)

    @field_validator("flower_user", "flower_password")
    @classmethod
    def _no_comma_for_flower(cls, value: str) -> str:
        # Flower splits its basic-auth setting at commas: only the part before one would count.
        if "," in value:
            raise ValueError("Flower cannot check a login with a comma in it: choose one without")
        return value

    @field_validator("redis_url")
    @classmethod
    def _a_redis_url(cls, value: str) -> str:
        if value:
            _check_redis_url(value)
        return value

    @field_validator("database_url")
    @classmethod
    def _a_database_toolrouter_runs_on(cls, value: str) -> str:
        if value:
            _check_database_url(value)
        return value

    @model_validator(mode="after")
    def _sentinel_needs_a_master(self) -> Settings:
        if self.redis_url.startswith("sentinel://") and not self.redis_sentinel_master:
            raise ValueError(
                "TOOLROUTER_REDIS_URL is a sentinel:// URL: set TOOLROUTER_REDIS_SENTINEL_MASTER"
                " to the name of the primary the sentinels watch"
            )
        return self

    @property
    def resolved_api_processes(self) -> int:
        # The cores this process may use (a container's or a taskset's), not the host's.
        return self.api_processes or min(8, max(1, len(os.sched_getaffinity(0)) // 2))

    @property
    def call_body_bytes(self) -> int:
        """The largest call body, or batch entry: arguments as large as allowed, written
        escaped, and room for the rest."""
        return ESCAPED_BYTES * self.max_args_bytes + CALL_ENVELOPE_BYTES

    @property
    def notify_attempt_s(self) -> float:
        """How long a notification attempt may take: where one worker serves decisions and
        notifications, a decision behind one still gets there within ``decision_timeout_s``."""
        return min(self.notify_timeout_s, self.decision_timeout_s / 2)

    @property
    def resolved_public_url(self) -> str:
        """Where the inbox is, as approvers reach it (no trailing slash)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        # The host's own name: no DNS lookup, which may hang or answer `localhost`.
        host = socket.gethostname() if self.public_url_guessed else self.api_host
        # An IPv6 address goes in brackets, or its colons would read as the port's.
        return (
            f"http://[{host}]:{self.api_port}" if ":" in host else f"http://{host}:{self.api_port}"
        )

    @property
    def public_url_guessed(self) -> bool:
        """Whether links name this machine because the API binds every interface and
        ``public_url`` is unset: right only if approvers reach the API by that name."""
        return not self.public_url and self.api_host in WILDCARD_HOSTS

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'toolrouter.db').resolve()}"

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    @property
    def resolved_secrets_dir(self) -> Path:
        return self.secrets_dir.expanduser().resolve()

    @property
    def logs_dir(self) -> Path:
        """Where `toolrouter up`'s processes and imported MCP servers write their output."""
        return self.state_dir.resolve() / "logs"

    @property
    def config_given(self) -> bool:
        """Whether the config file was named (``TOOLROUTER_CONFIG``): then it must exist."""
        return "config" in self.model_fields_set


REDIS_SCHEMES = frozenset({"redis", "rediss", "unix"})


def _check_database_url(url: str) -> None:
    """Refuse a URL the store cannot run on, before anything tries to connect with it."""
    accepted = (
        "use sqlite:///<path>, or postgresql://<user>@<host>/<database>"
        " (postgresql+psycopg:// alike)"
    )
    # Read with urllib, not SQLAlchemy: commands that only call the API never import it.
    scheme, separator, _ = url.partition("://")
    try:
        _ = urllib.parse.urlsplit(url).port  # a port that is no number fails here
    except ValueError:
        separator = ""
    if not separator or not scheme:
        # Not the value itself: it may hold a password.
        raise ValueError(f"not a database URL: {accepted}")
    if scheme.lower() not in DATABASE_DIALECTS:
        raise ValueError(f"{scheme}:// is not a database toolrouter runs on: {accepted}")


def _check_redis_url(url: str) -> None:
    """Refuse a Redis URL no client could use, before anything is changed that a client
    would then have to announce (a revoked key)."""
    if url.startswith("sentinel://"):
        return  # each sentinel is checked where the list is read (router.messaging.redis_clients)
    accepted = "use redis://<host>:<port>/<db> (rediss:// and unix:// alike), or sentinel://"
    scheme, separator, _ = url.partition("://")
    try:
        split = urllib.parse.urlsplit(url)
        _ = split.port  # a port that is no number, or out of range, fails here
    except ValueError:
        separator = ""
    if not separator or scheme.lower() not in REDIS_SCHEMES:
        # Not the value itself: it may hold a password.
        raise ValueError(f"not a Redis URL: {accepted}")
    database = split.path.strip("/")
    if scheme.lower() != "unix" and database and not (database.isascii() and database.isdigit()):
        # redis-py would drop it silently and use database 0: another deployment's.
        raise ValueError("a Redis URL's database is a number: redis://<host>:<port>/<db>")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()


def settings_or_exit() -> Settings:
    """``get_settings()`` for a process's entry point: a setting that cannot be used stops
    the process with one line per problem, each naming its variable, and no traceback."""
    try:
        return get_settings()
    except ValidationError as exc:
        for error in exc.errors():
            field = "".join(str(part) for part in error["loc"])
            where = f"TOOLROUTER_{field.upper()}: " if field else ""
            print(f"error: {where}{error['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        sys.exit(2)
