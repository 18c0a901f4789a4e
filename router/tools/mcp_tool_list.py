"""An MCP server's tool list, read page by page to an end: a server may page it without
one, so past these limits it is refused, not held. A tool in it that the MCP SDK cannot
read is left out, by name and why, rather than losing every other tool of its server."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp import types
from mcp.client import session as sdk_session
from mcp_types import methods
from pydantic import ValidationError

from ..errors import ToolListTooLong, ToolListUnreadable

# A real server's list is far shorter; an empty page still counts.
MAX_LISTED_TOOLS = 10_000
MAX_LISTED_PAGES = 1_000
# The tools' JSON, all pages together: each message is bounded, a thousand of them are not.
MAX_LISTED_BYTES = 64 * 1024 * 1024
LIST_METHOD = "tools/list"
# The SDK's own assumption for a session that has not said which version it speaks.
FALLBACK_VERSION = "2025-11-25"
# A name quoted in a reason: past this, the tool is named by its place in the list.
MAX_QUOTED_NAME = 128


@dataclass(slots=True)
class ToolListing:
    """The tools the SDK could read, and the others: their name (or place) and why not."""

    tools: list[Any] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def listed(self) -> int:
        return len(self.tools) + len(self.unreadable)


async def every_tool(client: Any) -> ToolListing:
    """Every tool of ``client``'s server, all pages; ``ToolListTooLong`` past the limits, or
    at a cursor an earlier page gave; ``ToolListUnreadable`` for a page that is no list."""
    listing = ToolListing()
    listed_bytes = 0
    cursors: set[str] = set()
    cursor = None
    for _ in range(MAX_LISTED_PAGES):
        try:
            page = await client.list_tools(cursor=cursor)
        except ValidationError as exc:
            # The SDK reads a page whole, and one tool it cannot read fails all of them.
            page = await _readable_page(client.session, cursor, listing, exc)
        listing.tools.extend(page.tools)
        if listing.listed > MAX_LISTED_TOOLS:
            raise ToolListTooLong(f"lists more than {MAX_LISTED_TOOLS} tools")
        listed_bytes += sum(len(tool.model_dump_json(exclude_none=True)) for tool in page.tools)
        if listed_bytes > MAX_LISTED_BYTES:
            raise ToolListTooLong(f"lists tools of more than {MAX_LISTED_BYTES} bytes in all")
        cursor = page.next_cursor
        if not cursor:
            return listing
        # Held as digests: a cursor is as long as the server makes it.
        seen = hashlib.sha256(cursor.encode("utf-8", "replace")).hexdigest()
        if seen in cursors:
            raise ToolListTooLong("repeats a cursor of its tool list")
        cursors.add(seen)
    raise ToolListTooLong(f"lists its tools on more than {MAX_LISTED_PAGES} pages")


async def _readable_page(
    session: Any, cursor: str | None, listing: ToolListing, refused: ValidationError
) -> types.ListToolsResult:
    """The page again, read tool by tool as the SDK reads a page; those it cannot read go
    into ``listing.unreadable``. The SDK offers no public way to take a result unchecked,
    so this sends as its ``send_request`` does and absorbs the page as its ``Client`` does;
    an SDK without those members refuses the page as it did (``refused``)."""
    stamp = getattr(session, "_stamp", None)
    send_raw = getattr(getattr(session, "_dispatcher", None), "send_raw_request", None)
    absorb = getattr(session, "_absorb_tool_listing", None)
    if stamp is None or send_raw is None or absorb is None:
        raise ToolListUnreadable(
            f"sends a tool the MCP SDK cannot read ({_first_problem(refused)}), and this "
            "version of the SDK cannot read the list tool by tool"
        )
    request = types.ListToolsRequest(params=types.PaginatedRequestParams(cursor=cursor))
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {}
    stamp(data, options)
    raw = await send_raw(LIST_METHOD, data.get("params"), options)
    version = session.protocol_version or FALLBACK_VERSION
    page, unreadable = readable_tools(raw, version, first_place=listing.listed + 1)
    listing.unreadable.update(unreadable)
    result = _parsed(page, version)
    complete = cursor is None and result.next_cursor is None
    # Caches each tool's output schema, which the SDK checks a call's result against.
    absorbed: types.ListToolsResult = absorb(result, complete=complete)
    return absorbed


def readable_tools(
    raw: Any, version: str, *, first_place: int
) -> tuple[dict[str, Any], dict[str, str]]:
    """``raw``, a tool list's page as sent, with the tools the SDK can read at ``version``
    alone; and the others, by name (or place in the list, from ``first_place``): why not.
    ``ToolListUnreadable`` when the page around them cannot be read."""
    listed = raw.get("tools") if isinstance(raw, dict) else None
    if not isinstance(listed, list):
        raise ToolListUnreadable("sends a tool list page whose tools are not a list")
    # Taken as the SDK's send_request takes a result: a later revision's fields dropped, a
    # negative TTL floored. Its private helpers, looked up here so that an SDK without them
    # only reads such a page more strictly, never fails to import.
    later_fields: Callable[[str, str], frozenset[str]] = getattr(
        sdk_session, "_later_revision_fields", lambda *_: frozenset()
    )
    floor_ttl: Callable[[dict[str, Any]], None] = getattr(
        sdk_session, "_clamp_inbound_ttl", lambda _: None
    )
    later = later_fields(LIST_METHOD, version)
    page = {key: value for key, value in raw.items() if key not in later}
    floor_ttl(page)
    _parsed({**page, "tools": []}, version)
    readable: list[Any] = []
    unreadable: dict[str, str] = {}
    for place, item in enumerate(listed, first_place):
        try:
            methods.validate_server_result(LIST_METHOD, version, {**page, "tools": [item]})
            types.Tool.model_validate(item, by_name=False)
        except ValidationError as exc:
            unreadable[_name_of(item, place)] = _first_problem(exc)
        else:
            readable.append(item)
    return {**page, "tools": readable}, unreadable


def _parsed(page: dict[str, Any], version: str) -> types.ListToolsResult:
    try:
        methods.validate_server_result(LIST_METHOD, version, page)
        return types.ListToolsResult.model_validate(page, by_name=False)
    except ValidationError as exc:
        problem = _first_problem(exc)
        raise ToolListUnreadable(f"sends a tool list page the SDK cannot read: {problem}") from None


def _name_of(item: Any, place: int) -> str:
    name = item.get("name") if isinstance(item, dict) else None
    if isinstance(name, str) and name.isprintable() and 0 < len(name) <= MAX_QUOTED_NAME:
        return name
    return f"#{place}"


def _first_problem(exc: ValidationError) -> str:
    """pydantic's first error in one line, where in the tool and what (never the value)."""
    errors = exc.errors()
    first = errors[0]
    where = [str(part) for part in first["loc"]]
    if where[:1] == ["tools"]:
        where = where[2:]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    text = f"{'.'.join(where)}: {first['msg']}" if where else str(first["msg"])
    # A location may hold the server's own keys.
    return "".join(ch if ch.isprintable() else "?" for ch in text[:300]) + more
