"""Just enough MCP over HTTP (JSON answers, no session) to start, list tools and call one,
for servers that answer what a real one would not: the list and the calls' answers are
the test's, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from router.tools.mcp_client import McpConnections
from router.tools.mcp_servers import HttpServer

from .handler_server import serving

# The result of a ``tools/list`` for its cursor (None on the first page).
Lister = Callable[[str | None], dict[str, Any]]


@dataclass(frozen=True)
class Streamed:
    """An answer's body sent in pieces, its length declared first: one too large to hold."""

    length: int
    pieces: Iterable[bytes]


# The answer's body to a ``tools/call`` message, whole or in pieces.
Caller = Callable[[dict[str, Any]], bytes | Streamed]


def raw_mcp(lister: Lister, caller: Caller | None = None) -> type[BaseHTTPRequestHandler]:
    """A handler class answering ``initialize``, ``tools/list`` from ``lister`` and
    ``tools/call`` from ``caller``; ``pages`` counts the lists asked for."""

    class RawMcp(BaseHTTPRequestHandler):
        pages = 0

        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if "id" not in message:
                self.send_response(202)
                self.end_headers()
                return
            method, params = message["method"], message.get("params") or {}
            result: Any = {}
            if method == "initialize":
                result = {
                    "protocolVersion": params["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw", "version": "1"},
                }
            elif method == "tools/list":
                type(self).pages += 1
                result = lister(params.get("cursor"))
            elif method == "tools/call" and caller is not None:
                self._answer(caller(message))
                return
            self._answer(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))

        def _answer(self, body: str | bytes | Streamed) -> None:
            whole = body.encode() if isinstance(body, str) else body
            length = whole.length if isinstance(whole, Streamed) else len(whole)
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(length))
            self.end_headers()
            try:
                for piece in whole.pieces if isinstance(whole, Streamed) else [whole]:
                    self.wfile.write(piece)
            except OSError:
                pass  # the client stopped reading

        def log_message(self, *_: Any) -> None:
            pass

    return RawMcp


def answer_with(result: bytes) -> Caller:
    """A call's answer whose ``result`` is the bytes given, as they are."""

    def answer(message: dict[str, Any]) -> bytes:
        return b'{"jsonrpc": "2.0", "id": %s, "result": %s}' % (
            json.dumps(message["id"]).encode(),
            result,
        )

    return answer


@contextmanager
def connected(
    handler: type[BaseHTTPRequestHandler], max_answer_bytes: int = 64 * 1024 * 1024
) -> Iterator[McpConnections]:
    with serving(handler) as port:
        connections = McpConnections(
            {"paging": HttpServer(url=f"http://127.0.0.1:{port}/mcp")},
            max_answer_bytes=max_answer_bytes,
        )
        try:
            yield connections
        finally:
            connections.close()
