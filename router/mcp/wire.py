"""What the SDK's parsing of a JSON-RPC message would lose, checked on its raw bytes.

The SDK takes a request whose ``id`` is neither a string nor an integer for a notification
(and answers nothing), so both transports look at the id before the SDK does.
"""

from __future__ import annotations

import pydantic_core

BAD_REQUEST_ID = "invalid request: a request's id must be a string or an integer"


def has_bad_request_id(body: bytes | None) -> bool:
    """A JSON object with a ``method`` and an ``id`` that is neither a string nor an integer
    (``null``, ``true``, ``1.5``, an object): no notification, and no valid request."""
    if body is None:
        return False
    try:
        # The SDK's own parser: it refuses nesting too deep for it with a ValueError too.
        message = pydantic_core.from_json(body)
    except ValueError:
        return False  # the SDK answers a parse error
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False
    request_id = message["id"]
    return not isinstance(request_id, str) and (
        not isinstance(request_id, int) or isinstance(request_id, bool)
    )
