"""How many calls of a shared message a pool process claims at once (``workers.pace``)."""

from __future__ import annotations

from workers.pace import Pace


def test_a_tool_not_run_yet_goes_one_call_at_a_time() -> None:
    assert Pace().calls_within("echo", hold_ms=5.0, most=8) == 1


def test_a_run_is_as_many_calls_as_fit_in_the_hold_within_the_message() -> None:
    pace = Pace()
    pace.observe("echo", 0.5)
    assert pace.calls_within("echo", hold_ms=5.0, most=64) == 10
    assert pace.calls_within("echo", hold_ms=5.0, most=8) == 8
    assert pace.calls_within("echo", hold_ms=0.0, most=8) == 1  # no hold: one at a time
    pace.observe("slow", 50.0)
    assert pace.calls_within("slow", hold_ms=5.0, most=8) == 1


def test_the_pace_follows_a_tool_that_slows_down_within_a_few_calls() -> None:
    pace = Pace()
    pace.observe("echo", 0.1)
    pace.observe("echo", 10.0)  # one odd call moves it by a fifth of the difference
    assert pace.ms("echo") == 0.1 + 0.2 * (10.0 - 0.1)
    for _ in range(10):
        pace.observe("echo", 10.0)
    ms = pace.ms("echo")
    assert ms is not None and 9.0 < ms < 10.0
    assert pace.calls_within("echo", hold_ms=5.0, most=8) == 1
    pace.forget()
    assert pace.ms("echo") is None
