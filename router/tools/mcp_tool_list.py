"""An MCP server's tool list, read page by page to an end: a server may page it without
one, so past these limits it is refused, not held."""

from __future__ import annotations

import hashlib
from typing import Any

from ..errors import ToolListTooLong

# A real server's list is far shorter; an empty page still counts.
MAX_LISTED_TOOLS = 10_000
MAX_LISTED_PAGES = 1_000


async def every_tool(client: Any) -> list[Any]:
    """Every tool of ``client``'s server, all pages; ``ToolListTooLong`` past the limits, or
    at a cursor an earlier page gave."""
    tools: list[Any] = []
    cursors: set[str] = set()
    cursor = None
    for _ in range(MAX_LISTED_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if len(tools) > MAX_LISTED_TOOLS:
            raise ToolListTooLong(f"lists more than {MAX_LISTED_TOOLS} tools")
        cursor = page.next_cursor
        if not cursor:
            return tools
        # Held as digests: a cursor is as long as the server makes it.
        seen = hashlib.sha256(cursor.encode("utf-8", "replace")).hexdigest()
        if seen in cursors:
            raise ToolListTooLong("repeats a cursor of its tool list")
        cursors.add(seen)
    raise ToolListTooLong(f"lists its tools on more than {MAX_LISTED_PAGES} pages")
