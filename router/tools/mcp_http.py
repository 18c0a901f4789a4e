"""The HTTP client for an MCP server over streamable HTTP: the SDK's timeouts, the
config's headers, proxies from the environment, and answers held to a size.

The SDK reads a JSON answer whole, and goes on reading it after the call has given up on
it: a server that sends without end would take the process's memory. Each answer other
than an event stream (whose events the SDK holds to 1 MiB each) is read no further than
``max_bytes``; past it the answer fails as a read error, and the call that waited on it
fails as ``AnswerTooLarge``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT


def http_client(
    headers: Mapping[str, str], max_bytes: int, cut: Callable[[], None]
) -> httpx2.AsyncClient:
    """A client as the SDK makes its own (its timeouts, proxies from the environment), whose
    answers stop at ``max_bytes``; ``cut`` is told of each answer stopped."""

    async def held(response: httpx2.Response) -> None:
        # Called before the body is read: the SDK reads the held stream instead.
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.stream = _HeldStream(response.stream, max_bytes, cut)

    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        event_hooks={"response": [held]},
    )


class _HeldStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, max_bytes: int, cut: Callable[[], None]) -> None:
        self._inner, self._max_bytes, self._cut = inner, max_bytes, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > self._max_bytes:
                # The SDK reports the read error as a lost session, without its text.
                self._cut()
                raise httpx2.ReadError(f"answer larger than {self._max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
