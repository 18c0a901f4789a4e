"""The tool registry: a mapping from names to tools, checked in full at registration.

Names are looked up in a ``dict`` and nothing else: never through attributes, so
``__class__`` or ``toString`` are unknown tools unless someone registered them.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from jsonschema import exceptions as schema_errors
from jsonschema import validators
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing.exceptions import Unresolvable

from ..constants import MCP_STATUS_TOOL, queue_for
from ..errors import ConfigError
from ..status import NON_APPROVER_ROLES
from .config import TOOL_NAME_RE, ToolConfig, ToolSpec
from .mcp_import import import_mcp_tools, merge_imported
from .routing_config import check_rule_tools
from .rules import ToolRules, compile_rules
from .schemas import schema_problem

if TYPE_CHECKING:
    from .mcp_client import McpConnections

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass(frozen=True)
class Tool:
    """A registered tool: its spec, its compiled argument validator, its resolved handler."""

    spec: ToolSpec
    validator: Any = field(repr=False)
    python_handler: Handler | None = field(default=None, repr=False)
    # Its conditions, compiled at start-up; None for the usual tool, whose gate is static.
    rules: ToolRules | None = field(default=None, repr=False)
    # Its schema holds every object valid (``accepts_any_object``).
    any_object: bool = field(default=False, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def queue(self) -> str:
        return queue_for(self.spec.risk)

    def argument_errors(self, args: Any) -> str | None:
        """The first schema violation of ``args`` as a sentence, or None when they are valid.

        Built from the schema, never from the offending value: these messages are audited,
        and arguments may be secrets.
        """
        if self.any_object and isinstance(args, dict):
            return None
        try:
            error = schema_errors.best_match(self.validator.iter_errors(args))
        except Unresolvable as exc:
            # A `$ref` outside the schema (none is fetched): the tool's fault, told as such
            # rather than as the database or Redis being down.
            ref = json.dumps(str(getattr(exc, "ref", "")))[:160]
            return f"cannot be checked: the tool's schema refers to {ref}, which is not in it"
        except re.error:
            # A pattern reached through a `$ref` into data, which the load-time check skips.
            return "cannot be checked: the tool's schema has a pattern only backtracking matches"
        except RecursionError:
            # A `$ref` loop (an MCP server's schema): each check would follow it for ever.
            return "cannot be checked: the tool's schema refers to itself without end"
        except OverflowError:
            # jsonschema divides a number by a float `multipleOf` before it guards the result.
            return "arguments: a number too large to check against the tool's schema"
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path) or "arguments"
        if error.validator in ("required", "additionalProperties", "dependentRequired"):
            # These name properties (from the schema, or the unexpected key), not values.
            return f"{where}: {error.message}"[:300]
        expected = json.dumps(error.validator_value, sort_keys=True, default=str)
        if len(expected) > 120:
            expected = expected[:120] + "…"
        return f"{where}: must satisfy {error.validator} {expected}"

    def describe(self) -> dict[str, Any]:
        """The public definition served by ``GET /v1/tools``."""
        spec = self.spec
        return {
            "name": spec.name,
            "description": spec.description,
            "category": spec.category,
            "risk": spec.risk,
            "requires_approval": spec.requires_approval
            if isinstance(spec.requires_approval, str)
            else spec.gated,
            "approvers": list(spec.approvers),
            "approvals_required": spec.approvals_required
            if isinstance(spec.approvals_required, int)
            else [branch.model_dump() for branch in spec.approvals_required],
            "idempotent": spec.idempotent,
            "timeout_s": spec.timeout_s,
            "cost_per_call": spec.cost_per_call,
            "capabilities": list(spec.capabilities),
            "limitations": list(spec.limitations),
            "input_schema": spec.input_schema,
            "output_schema": spec.output_schema,
            "handler_kind": spec.handler.kind,
            "version": spec.version,
        }


def is_idempotent(tool: Tool | None) -> TypeGuard[Tool]:
    """Whether a call of ``tool`` may run again: a tool no longer registered may not."""
    return tool is not None and tool.spec.idempotent


def import_handlers_from(folder: Path) -> None:
    """Let handler modules resolve relative to ``folder`` (the config file's), before the
    working directory, so every command loads the same tools wherever it is started."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)


def resolve_callable(path: str) -> Handler:
    """Import ``"package.module:function"``; raises ``ValueError`` with the reason."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"handler {path!r} is not of the form 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise ValueError(f"handler {path!r} is not callable")
    return target


class ToolRegistry:
    """Tools by name. Build it with ``from_config``; it never changes afterwards."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self._tools[tool.name] = tool
        self._by_name = sorted(self._tools.values(), key=lambda tool: tool.name)

    @classmethod
    def from_config(
        cls, config: ToolConfig, *, file: str = "<config>", mcp: McpConnections | None = None
    ) -> ToolRegistry:
        """Check every tool; import the tools of each MCP server in ``config`` through ``mcp``.
        Errors never carry the values of the config's ``${VAR}`` secrets."""
        try:
            return cls._build(config, file=file, mcp=mcp)
        except ConfigError as exc:
            raise config.redactor.config_error(exc) from None

    @classmethod
    def _build(cls, config: ToolConfig, *, file: str, mcp: McpConnections | None) -> ToolRegistry:
        tools: dict[str, Tool] = {}
        specs = list(config.tools)
        if config.mcp_servers:
            if mcp is None:
                raise ConfigError(
                    "mcp_servers are configured but no MCP client was given", file=file
                )
            specs = merge_imported(specs, import_mcp_tools(mcp, file=file), file=file)
        for spec in specs:
            if not TOOL_NAME_RE.fullmatch(spec.name):
                raise ConfigError(
                    "bad name: must match ^[A-Za-z0-9_.-]{1,64}$", file=file, tool=spec.name
                )
            if spec.name in tools:
                raise ConfigError("duplicate tool name", file=file, tool=spec.name)
            if spec.name == MCP_STATUS_TOOL:
                # Over MCP the built-in tool would answer in its place, unseen.
                raise ConfigError(
                    "reserved name: toolrouter's MCP server offers its own tool of this name"
                    " (an MCP server named 'toolrouter' may be imported under another name)",
                    file=file,
                    tool=spec.name,
                )
            tools[spec.name] = build_tool(spec, file=file)
        for tool in tools.values():
            for fallback in tool.spec.fallbacks:
                if fallback == tool.name:
                    raise ConfigError(
                        f"fallback {fallback} is the tool itself", file=file, tool=tool.name
                    )
                if fallback not in tools:
                    raise ConfigError(f"unknown fallback: {fallback}", file=file, tool=tool.name)
                if tools[fallback].spec.gated:
                    # A fallback runs without a request of its own: it must not need one.
                    raise ConfigError(
                        f"fallback {fallback} needs approval; gated tools cannot be fallbacks",
                        file=file,
                        tool=tool.name,
                    )
        # After the imports: a rule may name an MCP server's tool.
        check_rule_tools(config.routing, tools, file=file)
        return cls(tools.values())

    def get(self, name: object) -> Tool | None:
        """The tool registered under ``name``; None for anything else, including non-strings."""
        if not isinstance(name, str):
            return None
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def similar_names(self, name: str) -> list[str]:
        """Registered names close to ``name``, best first: a typo's likely meaning."""
        return difflib.get_close_matches(name, list(self._tools), n=3, cutoff=0.6)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._tools)


def build_tool(spec: ToolSpec, *, file: str) -> Tool:
    """Check one spec fully: schema, handler, approvers."""
    problem = schema_problem(spec.input_schema, spec.output_schema)
    if problem is not None:
        raise ConfigError(f"invalid JSON Schema: {problem}", file=file, tool=spec.name)
    validator_class = validators.validator_for(spec.input_schema)
    if not spec.approvers:
        raise ConfigError("approvers must name at least one role", file=file, tool=spec.name)
    built_in = sorted(role for role in set(spec.approvers) if role in NON_APPROVER_ROLES)
    if built_in:
        raise ConfigError(
            f"approvers cannot name {', '.join(map(repr, built_in))}: agent, operator and admin"
            " keys decide nothing; name an approver role (approver, or one such as finance)",
            file=file,
            tool=spec.name,
        )
    handler = None
    if spec.handler.python is not None:
        try:
            handler = resolve_callable(spec.handler.python)
        except ValueError as exc:
            raise ConfigError(f"unresolvable handler: {exc}", file=file, tool=spec.name) from None
    elif spec.handler.http is not None:
        url = spec.handler.http.url
        if not (url.startswith("http://") or url.startswith("https://")):
            raise ConfigError(f"http handler url must be http(s): {url}", file=file, tool=spec.name)
    rules = compile_rules(
        spec.requires_approval,
        spec.approvals_required,
        spec.deny_if,
        spec.deny_reason,
        file=file,
        tool=spec.name,
    )
    return Tool(
        spec=spec,
        # The metaschemas only: a `$ref` elsewhere is never fetched (a schema an MCP server
        # exports could name any address), it fails the arguments that reach it.
        validator=validator_class(spec.input_schema, registry=METASCHEMAS),
        python_handler=handler,
        rules=rules,
        any_object=accepts_any_object(spec.input_schema),
    )


# Keywords that describe a schema without narrowing what it accepts.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated"}
)


def accepts_any_object(schema: dict[str, Any]) -> bool:
    """Whether every JSON object is valid under ``schema``: ``{"type": "object"}``, with
    annotations and an empty ``properties`` at most. Such a tool (a Python handler that
    declares no schema gets this one) needs no validator run for arguments already known
    to be an object."""
    narrowing = set(schema) - _ANNOTATIONS - {"type", "properties"}
    return (
        schema.get("type") == "object" and not narrowing and schema.get("properties") in (None, {})
    )
