"""The one JSON response class of the API."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate a client sent in its arguments comes
    back as ``\\ud800`` instead of failing to encode (and turning into a 500)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode("ascii")
