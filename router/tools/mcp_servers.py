"""The ``mcp_servers`` table of the config: a server to launch (stdio) or to reach (HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import ConfigError


class StdioServer(BaseModel):
    """``{command, args, env, cwd}``: a server the router launches (Claude Desktop's shape)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str | None = None  # "stdio" in some clients' files; informational
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None


class HttpServer(BaseModel):
    """``{url, headers}``: a server reached over streamable HTTP."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str | None = None  # "http" / "streamable-http" in some clients' files
    url: str
    headers: dict[str, str] = {}


ServerSpec = StdioServer | HttpServer


def parse_servers(raw: dict[str, Any], *, file: str) -> dict[str, ServerSpec]:
    """The config's servers. A command runs in the config's folder, or in its ``cwd``
    taken from there: relative paths mean the same from wherever a process starts (an MCP
    client starts ``toolrouter mcp`` in a folder of its own)."""
    servers: dict[str, ServerSpec] = {}
    folder = Path(file).resolve().parent
    for name, entry in raw.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"mcp server {name!r} must be a mapping", file=file)
        try:
            spec = (HttpServer if "url" in entry else StdioServer).model_validate(entry)
            if isinstance(spec, StdioServer):
                spec = spec.model_copy(update={"cwd": str(folder / (spec.cwd or "."))})
            servers[name] = spec
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            reason = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
            raise ConfigError(f"mcp server {name!r}: {where}: {reason}", file=file) from None
    return servers
