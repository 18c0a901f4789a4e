"""The API's HTTP protocol: uvicorn's httptools one, with its one answer of its own in JSON.

uvicorn answers a request it cannot parse (a bad request line, a header no parser takes)
itself, before any application code runs, with a plain-text 400. Every other error of the
API is ``{"ok": false, "error": ...}``, so this one is too. Selected by ``--http`` in
``router.cli.processes.api_argv``.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ..canonical import ascii_json

# Written as every other error body is.
MALFORMED = ascii_json({"ok": False, "error": "malformed HTTP request"})


class JsonErrorsHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        head = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(MALFORMED),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + MALFORMED)
        self.transport.close()
