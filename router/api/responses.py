"""The one JSON response class of the API."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from ..canonical import ascii_json


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate a client sent in its arguments comes
    back as ``\\ud800`` instead of failing to encode (and turning into a 500)."""

    def render(self, content: Any) -> bytes:
        return ascii_json(content)
