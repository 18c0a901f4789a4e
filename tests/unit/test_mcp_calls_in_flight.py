"""The idempotency key an MCP request carries in ``_meta``. (Which call a cancelled
request made is kept in Redis: tests/core/test_mcp_state.py.)"""

from __future__ import annotations

import pytest

from router.errors import BadRequest
from router.mcp.calls_in_flight import IDEMPOTENCY_META, idempotency_key_of


def test_the_idempotency_key_comes_from_meta_and_must_be_a_string() -> None:
    assert idempotency_key_of({"_meta": {IDEMPOTENCY_META: "k1"}}) == "k1"
    assert idempotency_key_of({"_meta": {"progressToken": 1}}) is None
    assert idempotency_key_of({}) is None
    assert idempotency_key_of(None) is None
    with pytest.raises(BadRequest, match="must be a string"):
        idempotency_key_of({"_meta": {IDEMPOTENCY_META: 5}})
