"""The settings and tool-config references, from the models that read them."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

import refs_notes
from mkdocs.exceptions import PluginError
from pydantic import BaseModel
from refs_fields import field_table
from refs_markdown import paragraphs

from router.errors import ConfigError
from router.settings import Settings
from router.tools.config import ToolConfig, ToolSpec, parse_config
from router.tools.mcp_client import HttpServer, StdioServer
from router.tools.notify_config import EmailChannel, Notifications, SlackChannel, WebhookChannel
from router.tools.routing_config import Routing, Rule

# Top-level keys the loader also takes under another spelling.
KEY_ALIASES = {"mcp_servers": "mcpServers"}


def settings_reference() -> str:
    prefix = str(Settings.model_config.get("env_prefix", ""))
    # Every setting is described by the comment above it in router/settings.py.
    return field_table(
        Settings,
        {},
        key_header="variable",
        key=lambda name, _field: f"`{prefix}{name.upper()}`",
        link=_anchor_link,
    )


def _anchor_link(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{model.__name__.lower()})"


def _nested(model: type[BaseModel], path: str) -> list[tuple[type[BaseModel], str]]:
    """The models under ``model``'s fields, depth first, each with its key path."""
    found: list[tuple[type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        for inner in _models_in(field.annotation):
            where = f"{path}.{name}" if path else name
            found += [(inner, where), *_nested(inner, where)]
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType, tuple, list):
        # A list of tables (``approvals_required``'s branches) documents its table too.
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def tool_config_sections() -> list[tuple[type[BaseModel], str]]:
    """Every model of the config file, with the heading its table goes under."""
    sections: list[tuple[type[BaseModel], str]] = [
        (ToolConfig, "The top level"),
        (ToolSpec, "Each tool: `tools[]`"),
    ]
    sections += [(model, f"`{path}`") for model, path in _nested(ToolSpec, "")]
    sections += [
        (StdioServer, "An MCP server the router starts: `mcp_servers.<name>`"),
        (HttpServer, "An MCP server over HTTP: `mcp_servers.<name>` with a `url`"),
        (Routing, "Routing: `routing`"),
        (Rule, "A routing rule: `routing.rules[]`"),
        (Notifications, "Notifications: `notifications`"),
        (WebhookChannel, "A signed webhook: `notifications.channels.<name>`, `type: webhook`"),
        (SlackChannel, "A Slack webhook: `notifications.channels.<name>`, `type: slack`"),
        (EmailChannel, "Email over SMTP: `notifications.channels.<name>`, `type: email`"),
    ]
    return sections


def _key(name: str, alias: str | None) -> str:
    return f"`{name}` or `{alias}`" if alias else f"`{name}`"


def _check_aliases() -> None:
    """Each documented top-level key, under each spelling, is one the loader accepts."""
    for name in ToolConfig.model_fields:
        if ToolConfig.model_fields[name].exclude:
            continue
        for spelling in (name, KEY_ALIASES.get(name)):
            if spelling is None:
                continue
            empty = "[]" if name == "tools" else "{}"
            try:
                parse_config(f"{spelling}: {empty}\n", file="<docs>", env={})
            except ConfigError as exc:
                raise PluginError(
                    f"the documented top-level key {spelling} is refused: {exc}"
                ) from None


def tool_config_reference() -> str:
    _check_aliases()
    sections = tool_config_sections()
    documented = {model.__name__ for model, _ in sections}
    stale = sorted(set(refs_notes.TOOL_CONFIG) - documented)
    if stale:
        raise PluginError(f"refs_notes.TOOL_CONFIG has notes for models not documented: {stale}")
    parts: list[str] = []
    for model, heading in sections:
        anchor = model.__name__.lower()
        parts.append(f"## {heading} {{#{anchor}}}")
        own_doc = model.__dict__.get("__doc__")
        intro = f"`{model.__name__}`" + (
            ": " + paragraphs(own_doc, where=model.__qualname__) if own_doc else "."
        )
        parts.append(intro)

        aliases = KEY_ALIASES if model is ToolConfig else {}
        parts.append(
            field_table(
                model,
                refs_notes.TOOL_CONFIG.get(model.__name__, {}),
                key_header="key",
                key=lambda name, _field, aliases=aliases: _key(name, aliases.get(name)),
                link=_anchor_link,
            )
        )
    return "\n\n".join(parts)
