"""Turning an MCP server's tools into tool specs: ``<server>.<tool>``, risk from annotations.

Risk follows the MCP annotations, failing closed: ``readOnlyHint`` → low; an explicit
``destructiveHint: false`` → medium; anything else (destructive, or no hint at all) →
high, which is gated. A tool entry in the config with ``handler: {mcp: …}`` overrides what
was imported, key by key.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .config import TOOL_NAME_RE, ToolSpec
from .schemas import schema_problem

if TYPE_CHECKING:
    from .mcp_client import McpConnections

log = logging.getLogger(__name__)


def risk_of(annotations: Any) -> str:
    if annotations is not None and annotations.read_only_hint is True:
        return "low"
    if annotations is not None and annotations.destructive_hint is False:
        return "medium"
    return "high"


def spec_of(server: str, tool: Any) -> ToolSpec | None:
    """The spec for one imported tool; None when its name cannot be a toolrouter name or
    its schemas cannot check anything: one server's tool never stops the router starting."""
    name = f"{server}.{tool.name}"
    if not TOOL_NAME_RE.fullmatch(name):
        log.warning("skipping MCP tool %r of %s: not a valid tool name", tool.name, server)
        return None
    input_schema = tool.input_schema or {"type": "object"}
    problem = schema_problem(input_schema, tool.output_schema)
    if problem is not None:
        log.warning(
            "skipping MCP tool %r of %s: invalid JSON Schema: %s", tool.name, server, problem
        )
        return None
    annotations = tool.annotations
    return ToolSpec.model_validate(
        {
            "name": name,
            "description": tool.description or tool.title or "",
            "category": f"mcp:{server}",
            "handler": {"mcp": {"server": server, "tool": tool.name}},
            "risk": risk_of(annotations),
            "idempotent": bool(annotations and annotations.idempotent_hint),
            "input_schema": input_schema,
            "output_schema": tool.output_schema,
        }
    )


def import_mcp_tools(mcp: McpConnections, *, file: str) -> dict[str, ToolSpec]:
    """Connect to every server and import its tools; a server that fails is a config error."""
    imported: dict[str, ToolSpec] = {}
    for server in mcp.servers:
        try:
            tools = mcp.list_tools(server)
        except Exception as exc:
            why = mcp.why_unreachable(server, exc)
            raise ConfigError(
                f"mcp server {server!r} cannot be reached: {why}", file=file
            ) from None
        for tool in tools:
            spec = spec_of(server, tool)
            if spec is not None:
                imported[spec.name] = spec
    return imported


def merge_imported(
    configured: list[ToolSpec], imported: dict[str, ToolSpec], *, file: str
) -> list[ToolSpec]:
    """Configured tools plus imported ones; a configured MCP tool overrides its import."""
    merged: list[ToolSpec] = []
    overridden: set[str] = set()
    for spec in configured:
        target = spec.handler.mcp
        if target is None:
            merged.append(spec)
            continue
        base = imported.get(f"{target.server}.{target.tool}")
        if base is None:
            raise ConfigError(
                f"mcp server {target.server!r} offers no tool {target.tool!r}",
                file=file,
                tool=spec.name,
            )
        overridden.add(base.name)
        values = base.model_dump()
        values.update({key: getattr(spec, key) for key in spec.model_fields_set})
        merged.append(ToolSpec.model_validate(values))
    merged.extend(spec for name, spec in imported.items() if name not in overridden)
    return merged
