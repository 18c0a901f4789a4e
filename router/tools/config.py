"""Loading the YAML tool config: ``${VAR}`` interpolation and the typed tool spec.

Every mistake is a ``ConfigError`` naming the file, the tool and the reason, raised at
start-up rather than at the first call.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError
from ..trust.redaction import Redactor
from .interpolation import check_headers, interpolate
from .notify_config import (
    EscalateTo,
    Notifications,
    check_escalation,
    check_tool_channels,
    parse_notifications,
)
from .routing_config import Routing, parse_routing
from .rules import ApprovalCount

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
PERIOD_S = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
}
EXAMPLE_CONFIG = "example_tools.yaml"
# Calls of a Python tool one worker message carries at most, unless the tool says.
PYTHON_CALLS_PER_MESSAGE = 8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    # Attempts in all, the first included; 1: no retry.
    max_attempts: int = Field(default=1, ge=1, le=100)
    # Ceiling of the delay before the first retry; it doubles with each retry, and the delay
    # is drawn between half the ceiling and the ceiling, so retries of many calls spread out.
    backoff_s: float = Field(default=1.0, ge=0)
    # Largest ceiling. A longer `Retry-After` from an HTTP service wins.
    max_backoff_s: float = Field(default=60.0, ge=0)


class HttpHandler(_Strict):
    # The endpoint, `http://` or `https://`; may use `${VAR}`.
    url: str
    # `GET` sends the arguments as query parameters; the others as a JSON body.
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    # Sent with every call; values may use `${VAR}` (kept out of errors and logs) and must
    # be one line of ASCII once interpolated.
    headers: dict[str, str] = Field(default_factory=dict)


class McpHandler(_Strict):
    # A server's name in `mcp_servers`.
    server: str
    # The tool's name on that server.
    tool: str


class HandlerSpec(_Strict):
    """Exactly one handler kind; a plain string in YAML means ``python``."""

    # `module:function`, called as `function(args, ctx)` in a worker.
    python: str | None = None
    # An HTTP endpoint (the `handler.http` table).
    http: HttpHandler | None = None
    # A tool of a server in `mcp_servers` (the `handler.mcp` table).
    mcp: McpHandler | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> HandlerSpec:
        if sum(kind is not None for kind in (self.python, self.http, self.mcp)) != 1:
            raise ValueError("handler needs exactly one of: python, http, mcp")
        return self

    @property
    def kind(self) -> str:
        return "python" if self.python else "http" if self.http else "mcp"


class ToolSpec(_Strict):
    """One tool as written in the config (SPEC §3)."""

    # The name calls use, unique in the config: 1-64 of `A-Z a-z 0-9 _ . -`, and not
    # `toolrouter.call_status` (toolrouter's own MCP tool). Imported MCP tools are named
    # `<server>.<tool>`.
    name: str
    # What the tool does, for agents choosing one: shown in `GET /v1/tools` and MCP
    # `tools/list`, and ranked by `POST /v1/route`.
    description: str = ""
    # A label for grouping, shown with the tool and ranked by `POST /v1/route`.
    category: str = "general"
    # What runs a call: a Python function, an HTTP endpoint or an MCP server's tool. A plain
    # string is a Python handler, `module:function`.
    handler: HandlerSpec
    # The queue a call goes to (`tools.<risk>`), so slow or dangerous tools never hold up
    # safe ones. `high` is gated unless `requires_approval: false` says otherwise.
    risk: Literal["low", "medium", "high"] = "low"
    # Whether a call waits for approval; unset: exactly when `risk: high`; a string: a CEL rule.
    requires_approval: bool | str | None = None
    # Roles whose keys may decide this tool's requests; custom roles (such as `finance`)
    # work like `approver`. At least one; never `agent`, `operator` or `admin`.
    approvers: tuple[str, ...] = ("approver",)
    # Distinct approvers needed to release a call; one denial ends the request. Or a list of
    # `{when, count}`: CEL conditions tried in order, the first that holds giving the count.
    approvals_required: Annotated[int, Field(ge=1)] | tuple[ApprovalCount, ...] = 1
    # A CEL rule that refuses a call when it holds: `denied`, not stored, nothing runs.
    deny_if: str | None = None
    # What a refusal by `deny_if` gives as its reason; unset: the rule's text.
    deny_reason: str | None = None
    # Seconds a request waits for its decisions before it expires, and its call with it.
    approval_timeout_s: float = Field(default=3600.0, gt=0)
    # Channels in `notifications.channels` told of this tool's requests, besides those of
    # its approver roles (`notifications.roles`).
    notify: tuple[str, ...] = ()
    # Seconds undecided before `escalate_to` is told (event `escalated`, once); unset: never.
    escalate_after_s: float | None = Field(default=None, gt=0)
    # Who is told when `escalate_after_s` passes (the `escalate_to` table below).
    escalate_to: EscalateTo | None = None
    # Whether a run whose outcome was lost may run again. A lost run of an idempotent tool
    # is queued again; of any other tool, the call ends `interrupted`.
    idempotent: bool = False
    # Seconds a run may take; then the call fails with `timeout after N s`. A handler that
    # swallows the limit is ended 10 s later.
    timeout_s: float = Field(default=30.0, gt=0, le=86_400)
    # How retryable failures are retried (the `retry` table below).
    retry: RetryPolicy = RetryPolicy()
    # `N/s`, `N/m` or `N/h`: a token bucket in Redis shared by every worker. Over the limit
    # a call waits in the broker; it does not fail.
    rate_limit: str | None = None
    # Summed per tool (`/metrics`, `GET /v1/tools/{name}`) and per key (`toolrouter stats`);
    # the `cost` routing strategy ranks by it.
    cost_per_call: float = Field(default=0.0, ge=0)
    # Seconds a success is served again for identical arguments without running the handler
    # (audited `ok` with `cached: true`); 0: no cache.
    cache_ttl_s: float = Field(default=0.0, ge=0)
    # Tools tried in turn, in the same run, when a call fails for good; the answer names the
    # one that answered (`answered_by`). Gated tools cannot be fallbacks.
    fallbacks: tuple[str, ...] = ()
    # How many calls of this tool one worker message may carry (``message_builder.pack``).
    # Unset: several for Python handlers, whose run is short next to Celery's work per
    # message; one for HTTP and MCP tools, whose calls are better run side by side.
    calls_per_message: int | None = Field(default=None, ge=1, le=64)
    # Capabilities (such as `search.web`) a call may name instead of a tool; ranked by
    # `POST /v1/route`.
    capabilities: tuple[str, ...] = ()
    # What the tool cannot do, published with its definition for agents.
    limitations: tuple[str, ...] = ()
    # JSON Schema the arguments must satisfy; a call whose arguments do not is `rejected` at
    # submission, before anything is queued.
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    # JSON Schema of the result, published with the tool's definition (checked to be a valid
    # schema; results are not validated against it).
    output_schema: dict[str, Any] | None = None
    # The tool's version, published with its definition.
    version: str = "1"

    @model_validator(mode="before")
    @classmethod
    def _string_handler_is_python(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("handler"), str):
            data = {**data, "handler": {"python": data["handler"]}}
        return data

    @model_validator(mode="after")
    def _rate_limit_is_well_formed(self) -> ToolSpec:
        if self.rate_limit is not None:
            parse_rate(self.rate_limit)
        return self

    @property
    def max_calls_per_message(self) -> int:
        if self.calls_per_message is not None:
            return self.calls_per_message
        return PYTHON_CALLS_PER_MESSAGE if self.handler.kind == "python" else 1

    @property
    def gated(self) -> bool:
        """Whether a call may wait for approval: explicit or a rule, else high risk."""
        if self.requires_approval is None:
            return self.risk == "high"
        return bool(self.requires_approval)


def parse_rate(text: str) -> tuple[float, float]:
    """``"10/s"`` → (capacity 10, 10 tokens per second). ``ValueError`` if malformed."""
    match = RATE_RE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"rate_limit {text!r} is not N/s, N/m or N/h")
    count = float(match.group(1))
    return count, count / PERIOD_S[match.group(2)]


class ToolConfig(_Strict):
    # The tools, each a mapping of the keys in the next table.
    tools: tuple[ToolSpec, ...] = ()
    # MCP servers by name; each server's tools are imported as `<server>.<tool>`. Claude
    # Desktop's spelling `mcpServers` is accepted too, so its `claude_desktop_config.json`
    # works as a config as it is.
    mcp_servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Rules for the `rules` routing strategy (the `routing` table below).
    routing: Routing = Routing()
    # Channels that tell approvers of requests pending, decided or expired, and the channels
    # of each approver role (the `notifications` tables below).
    notifications: Notifications = Notifications()
    # Every ``${VAR}`` interpolated, with its value: what ``router.trust.redaction`` hides.
    secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def redactor(self) -> Redactor:
        return Redactor(self.secrets)


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    return f"{where}: {message}" if where else message


def parse_config(text: str, *, file: str, env: Mapping[str, str] | None = None) -> ToolConfig:
    """Parse config text; raises ``ConfigError`` on the first problem found, with the
    values of ``${VAR}`` secrets replaced by their names."""
    env = os.environ if env is None else env
    used: dict[str, str] = {}
    try:
        return _parse(text, file=file, env=env, used=used)
    except ConfigError as exc:
        raise Redactor(used).config_error(exc) from None


def _parse(text: str, *, file: str, env: Mapping[str, str], used: dict[str, str]) -> ToolConfig:
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=file) from None
    if not isinstance(raw, dict):
        raise ConfigError("top level must be a mapping with a 'tools' list", file=file)
    ours = {"tools", "mcp_servers", "routing", "notifications"}
    unknown = set(raw) - ours - {"mcpServers"}
    # An MCP client's own file (Claude Desktop's) holds that app's settings beside its
    # servers: used as it is, only its servers are read.
    if unknown and not ("mcpServers" in raw and not ours & set(raw)):
        raise ConfigError(f"unknown key: {sorted(map(str, unknown))[0]}", file=file)
    raw_tools = raw.get("tools") or []
    if not isinstance(raw_tools, list):
        raise ConfigError("'tools' must be a list", file=file)
    tools = []
    for index, item in enumerate(raw_tools):
        name = item.get("name") if isinstance(item, dict) else None
        label = name if isinstance(name, str) else f"#{index}"
        if not isinstance(item, dict):
            raise ConfigError("each tool must be a mapping", file=file, tool=label)
        handler = item.get("handler")
        if isinstance(handler, dict) and isinstance(handler.get("http"), dict):
            check_headers(
                handler["http"].get("headers"), env, file=file, tool=label, where="http handler"
            )
        item = interpolate(item, env, file=file, tool=label, used=used)
        try:
            tools.append(ToolSpec.model_validate(item))
        except ValidationError as exc:
            raise ConfigError(_describe(exc), file=file, tool=label) from None
    servers = raw.get("mcp_servers") or raw.get("mcpServers") or {}
    if isinstance(servers, dict):
        for name, server in servers.items():
            if isinstance(server, dict):
                check_headers(
                    server.get("headers"), env, file=file, tool=None, where=f"mcp server {name}"
                )
    servers = interpolate(servers, env, file=file, tool=None, used=used, at="mcp_servers")
    routing = parse_routing(raw.get("routing") or None, file=file)
    notifications = parse_notifications(
        raw.get("notifications"), env, file=file, interpolate=interpolate, used=used
    )
    for spec in tools:
        check_tool_channels(spec.name, spec.notify, notifications, file=file)
        check_escalation(spec, notifications, file=file)
    return ToolConfig(
        tools=tuple(tools),
        mcp_servers=servers,
        routing=routing,
        notifications=notifications,
        secrets=used,
    )


def load_config(
    path: Path, env: Mapping[str, str] | None = None, *, required: bool = False
) -> ToolConfig:
    """Load ``path``. When it does not exist: an error if the file was named (``required``),
    else the built-in example config."""
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read it: {exc}", file=str(path)) from None
        return parse_config(text, file=str(path), env=env)
    if required:
        what = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"TOOLROUTER_CONFIG names {str(path)!r}, which {what}")
    if path.exists():
        raise ConfigError(f"{str(path)!r} is not a file")
    if path.is_symlink():
        # Meant as the config, but pointing nowhere: the example tools would pass for it.
        raise ConfigError(f"{str(path)!r} is a link that leads to no file")
    return parse_config(builtin_config_text(), file=BUILTIN_CONFIG_LABEL, env=env)


BUILTIN_CONFIG_LABEL = f"<built-in {EXAMPLE_CONFIG}>"


def builtin_config_text() -> str:
    return resources.files("router").joinpath(EXAMPLE_CONFIG).read_text(encoding="utf-8")


def config_in_use(path: Path, *, required: bool) -> str:
    """What a banner names as the config: the file's absolute path, or the built-in one."""
    if path.is_file() or required:
        return str(path.resolve())
    if path.is_symlink():
        return f"{path.absolute()} (a link that leads to no file)"
    return f"{BUILTIN_CONFIG_LABEL} (no {path} here)"
