"""A config secret in a tool's answer is replaced by its variable's name before the answer
is stored, cached or told; where that would leave no JSON, the call fails instead."""

from __future__ import annotations

import json

from router.trust.redaction import Redactor
from workers.execution.call_runner import _without_secrets
from workers.handlers import Outcome

REDACT = Redactor({"TOKEN": "tok-0123456789", "PIN": "12345678"})


def test_a_secret_in_a_string_of_the_value_is_named() -> None:
    answered = Outcome(ok=True, value_json=json.dumps({"echo": "Bearer tok-0123456789"}))
    named = _without_secrets(answered, REDACT)
    assert named.ok and json.loads(named.value_json or "") == {"echo": "Bearer ${TOKEN}"}


def test_a_value_without_secrets_is_left_as_it_is() -> None:
    answered = Outcome(ok=True, value_json='{"n": 1}', content_json='[{"type": "text"}]')
    assert _without_secrets(answered, REDACT) is answered
    assert _without_secrets(answered, Redactor()) is answered


def test_a_secret_outside_any_string_fails_the_call() -> None:
    answered = Outcome(ok=True, value_json='{"pin": 12345678}')
    failed = _without_secrets(answered, REDACT)
    assert not failed.ok and failed.error_type == "SecretInResult"
    assert "12345678" not in (failed.error or "")
