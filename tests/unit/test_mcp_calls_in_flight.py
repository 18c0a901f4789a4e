"""Which call a cancelled MCP request made, by the key and the request's id."""

from __future__ import annotations

import pytest

from router.errors import BadRequest
from router.mcp.calls_in_flight import IDEMPOTENCY_META, CallsInFlight, idempotency_key_of


def test_a_cancel_finds_the_call_of_that_key_and_that_id_only() -> None:
    calls = CallsInFlight()
    calls.add("a", 7, "call_1")
    calls.add("b", 7, "call_2")
    calls.add("a", "7", "call_3")
    assert calls.take("a", 7) == "call_1"
    assert calls.take("a", 7) is None  # taken once
    assert calls.take("a", "7") == "call_3"
    assert calls.take("c", 7) is None
    assert calls.take("b", 7) == "call_2"


def test_an_answered_request_no_longer_names_its_call_and_a_shared_id_is_ambiguous() -> None:
    calls = CallsInFlight()
    calls.add("a", 1, "call_1")
    calls.done("a", 1, "call_1")
    assert calls.take("a", 1) is None
    calls.add("a", 2, "call_2")
    calls.add("a", 2, "call_3")
    assert calls.take("a", 2) is None


def test_the_idempotency_key_comes_from_meta_and_must_be_a_string() -> None:
    assert idempotency_key_of({"_meta": {IDEMPOTENCY_META: "k1"}}) == "k1"
    assert idempotency_key_of({"_meta": {"progressToken": 1}}) is None
    assert idempotency_key_of({}) is None
    assert idempotency_key_of(None) is None
    with pytest.raises(BadRequest, match="must be a string"):
        idempotency_key_of({"_meta": {IDEMPOTENCY_META: 5}})
