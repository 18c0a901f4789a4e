"""A test-only HTTP proxy that puts a bearer key on every request it forwards.

Off-the-shelf MCP clients without a way to set headers (the official conformance suite,
the Inspector's CLI before ``--header``) reach ``/mcp`` through it. The server's own auth
is untouched: the proxy only adds the key a well-behaved client would send. Everything
else goes through as it came, ``Host`` and ``Origin`` included, so the server's DNS
rebinding check sees what the client sent; responses are streamed back as they arrive, so
an event stream's events are not held until its end.

Run it by hand (the key from ``TOOLROUTER_KEY``)::

    TOOLROUTER_KEY=trk_… python -m tests.support.mcp_key_proxy http://127.0.0.1:8000 --port 8765
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

# Per connection, not end to end (RFC 9110 §7.6.1): never forwarded as they came.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Long enough for a tool call the server waits on; the test's own timeout ends a hung run.
UPSTREAM_TIMEOUT_S = 300


class KeyProxy:
    """Listens on ``127.0.0.1:<port>`` (a free one by default) from construction on, and
    forwards to ``upstream`` with ``Authorization: Bearer <key>``; ``url`` is its base."""

    def __init__(self, upstream: str, key: str, port: int = 0) -> None:
        target = urlsplit(upstream)
        if target.scheme != "http" or not target.hostname:
            raise ValueError(f"upstream must be an http:// URL, not {upstream!r}")
        handler = type(
            "Handler",
            (_Forward,),
            {"upstream": (target.hostname, target.port or 80), "key": key},
        )
        self.server = _Server(("127.0.0.1", port), handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> KeyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up on its kept-alive connection is no fault of the proxy's.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Forward(BaseHTTPRequestHandler):
    """One client connection: each request goes upstream on a connection of its own."""

    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    key: str

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_OPTIONS(self) -> None:
        self._forward()

    def _forward(self) -> None:
        body = self._body()
        headers = {
            name: value
            for name, value in self.headers.items()
            if name.lower() not in HOP_BY_HOP | {"authorization", "content-length"}
        }
        headers["Authorization"] = f"Bearer {self.key}"
        if body is not None:
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(*self.upstream, timeout=UPSTREAM_TIMEOUT_S)
        try:
            try:
                # skip_host: the client's own Host goes upstream, as the server must judge it.
                upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in headers.items():
                    upstream.putheader(name, value)
                upstream.endheaders(body)
                response = upstream.getresponse()
            except OSError as exc:
                self._fail(exc)
                return
            try:
                self._relay(response)
            except OSError:
                # One side hung up mid-answer: this connection can say nothing more.
                self.close_connection = True
        finally:
            upstream.close()

    def _body(self) -> bytes | None:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            pieces = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                pieces.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailer fields, dropped
            return b"".join(pieces)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else None

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        length = response.getheader("content-length")
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        chunked = length is None and self.command != "HEAD" and response.status not in (204, 304)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while piece := response.read1(65536):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            self.wfile.flush()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _fail(self, exc: OSError) -> None:
        payload = f"proxy: upstream failed: {exc}".encode()
        try:
            self.send_response(502)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", help="the API's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--port", type=int, default=0, help="where to listen (default: free)")
    options = parser.parse_args()
    key = os.environ.get("TOOLROUTER_KEY")
    if not key:
        parser.error("set TOOLROUTER_KEY to the agent key to add")
    with KeyProxy(options.upstream, key, options.port) as proxy:
        print(f"forwarding {proxy.url} -> {options.upstream}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
