"""How long a notification attempt may take, beside how long the API waits for a decision."""

from __future__ import annotations

from router.settings import Settings


def test_an_attempt_takes_its_timeout_within_half_the_wait_for_a_decision(
    no_toolrouter_env: None,
) -> None:
    assert Settings(notify_timeout_s=5, decision_timeout_s=10).notify_attempt_s == 5
    assert Settings(notify_timeout_s=4, decision_timeout_s=10).notify_attempt_s == 4


def test_an_attempt_never_outlasts_half_the_wait_for_a_decision(no_toolrouter_env: None) -> None:
    # A decision may wait in the approval worker for an attempt under way to end.
    assert Settings(notify_timeout_s=30, decision_timeout_s=8).notify_attempt_s == 4
