"""Turning an MCP server's tools into tool specs: ``<server>.<tool>``, risk from annotations.

Risk follows the MCP annotations, failing closed: ``readOnlyHint`` → low; an explicit
``destructiveHint: false`` → medium; anything else (destructive, or no hint at all) →
high, which is gated. A tool entry in the config with ``handler: {mcp: …}`` overrides what
was imported, key by key.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, ToolListRefused
from .config import TOOL_NAME_RE, ToolSpec
from .schemas import schema_problem

# Characters of an imported tool's description kept (a server may send megabytes).
DESCRIPTION_CHARS = 10_000

if TYPE_CHECKING:
    from .mcp_client import McpConnections

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Skipped:
    """An MCP tool not imported, and why."""

    why: str


@dataclass(slots=True)
class Imported:
    """What the MCP servers offer: the tools imported, by name, and those skipped."""

    specs: dict[str, ToolSpec] = field(default_factory=dict)
    skipped: dict[str, Skipped] = field(default_factory=dict)


def risk_of(annotations: Any) -> str:
    if annotations is not None and annotations.read_only_hint is True:
        return "low"
    if annotations is not None and annotations.destructive_hint is False:
        return "medium"
    return "high"


def spec_of(server: str, tool: Any) -> ToolSpec | Skipped:
    """The spec for one imported tool, or why not: its name cannot be a toolrouter name or
    its schemas cannot check anything. One server's tool never stops the router starting."""
    name = f"{server}.{tool.name}"
    if not TOOL_NAME_RE.fullmatch(name):
        return Skipped("not a valid tool name")
    input_schema = tool.input_schema or {"type": "object"}
    problem = schema_problem(input_schema, tool.output_schema)
    if problem is not None:
        return Skipped(f"invalid JSON Schema: {problem}")
    annotations = tool.annotations
    return ToolSpec.model_validate(
        {
            "name": name,
            "description": _shortened(tool.description or tool.title or ""),
            "category": f"mcp:{server}",
            "handler": {"mcp": {"server": server, "tool": tool.name}},
            "risk": risk_of(annotations),
            "idempotent": bool(annotations and annotations.idempotent_hint),
            "input_schema": input_schema,
            "output_schema": tool.output_schema,
        }
    )


def _shortened(description: str) -> str:
    """A server's description, cut: it is served to every agent listing tools, and read
    by the ranking on every route."""
    if len(description) <= DESCRIPTION_CHARS:
        return description
    return description[: DESCRIPTION_CHARS - 1] + "…"


def import_mcp_tools(mcp: McpConnections, *, file: str) -> Imported:
    """Connect to every server and import its tools; a server that fails is a config error."""
    imported = Imported()
    # Which server's tool each name came from: "a" offering "b.c" and "a.b" offering "c"
    # both make "a.b.c", and a call must never reach one it did not name.
    origin: dict[str, str] = {}
    collided: set[str] = set()
    for server in mcp.servers:
        try:
            listing = mcp.list_tools(server)
        except ToolListRefused as exc:
            raise ConfigError(f"mcp server {server!r} {exc}", file=file) from None
        except Exception as exc:
            why = mcp.why_unreachable(server, exc)
            raise ConfigError(
                f"mcp server {server!r} cannot be reached: {why}", file=file
            ) from None
        skipped = {
            name: Skipped(f"the MCP SDK cannot read it: {why}")
            for name, why in listing.unreadable.items()
        }
        for tool in listing.tools:
            spec = spec_of(server, tool)
            if isinstance(spec, Skipped):
                skipped[tool.name] = spec
            elif spec.name in origin:
                collided.add(spec.name)
                origin[spec.name] += f" and {tool.name!r} of {server}"
            else:
                imported.specs[spec.name] = spec
                origin[spec.name] = f"{tool.name!r} of {server}"
        for name, skip in skipped.items():
            log.warning("skipping MCP tool %r of %s: %s", name, server, skip.why)
            imported.skipped[f"{server}.{name}"] = skip
    for name in collided:
        why = f"two MCP tools would be named {name}: {origin[name]}; neither is served"
        log.warning("skipping MCP tool %s: %s", name, why)
        del imported.specs[name]
        imported.skipped[name] = Skipped(why)
    return imported


def merge_imported(configured: list[ToolSpec], imported: Imported, *, file: str) -> list[ToolSpec]:
    """Configured tools plus imported ones; a configured MCP tool overrides its import."""
    merged: list[ToolSpec] = []
    overridden: set[str] = set()
    for spec in configured:
        target = spec.handler.mcp
        if target is None:
            merged.append(spec)
            continue
        name = f"{target.server}.{target.tool}"
        base = imported.specs.get(name)
        if base is None:
            skipped = imported.skipped.get(name)
            why = (
                f"mcp server {target.server!r} offers no tool {target.tool!r}"
                if skipped is None
                else f"mcp tool {target.tool!r} of {target.server!r} was skipped: {skipped.why}"
            )
            raise ConfigError(why, file=file, tool=spec.name)
        overridden.add(base.name)
        values = base.model_dump()
        values.update({key: getattr(spec, key) for key in spec.model_fields_set})
        merged.append(ToolSpec.model_validate(values))
    merged.extend(spec for name, spec in imported.specs.items() if name not in overridden)
    return merged
