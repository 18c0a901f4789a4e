"""What a field means, for the fields whose source does not say it.

The reference takes a field's description from its source first (see ``refs_fields``).
These notes fill in for fields without a comment or a pydantic description. Once the
source describes a field, the build fails until its note here is deleted; a note for a
field that no longer exists fails it too.
"""

from __future__ import annotations

# router.tools.mcp_client, by model name: the server models the config file shares with
# MCP clients' own files.
TOOL_CONFIG: dict[str, dict[str, str]] = {
    "StdioServer": {
        "command": "The program to start; it speaks MCP on its stdin and stdout.",
        "args": "Its arguments.",
        "env": "Environment variables for it; values may use `${VAR}`.",
        "cwd": "Its working directory.",
    },
    "HttpServer": {
        "url": "The server's streamable-HTTP endpoint.",
        "headers": "Headers sent with every request; values may use `${VAR}`.",
    },
}
