"""Which message may take a notification delivery for an attempt: the clocks of the
process that set when it is due and of the one that reads the message differ."""

from __future__ import annotations

from approvals.gate import Gate
from router.clock import FakeClock
from router.metrics import NotifyOutcome
from router.notify import deliveries
from router.notify.model import DeliveryStatus, NotifyEvent
from router.runtime import Runtime


def planned_at(runtime: Runtime, at: int) -> str:
    with runtime.store.transaction() as conn:
        (planned,) = deliveries.plan(
            conn,
            request_id="req-1",
            call_id="call_1",
            tool="wire",
            event=NotifyEvent.PENDING,
            channels=[("hook", "webhook")],
            now=at,
        )
    return planned.id


def claimed(runtime: Runtime, delivery_id: str, now: int) -> bool:
    with runtime.store.transaction() as conn:
        delivery = deliveries.get(conn, delivery_id)
        assert delivery is not None
        return deliveries.claim(conn, delivery, now=now)


def test_a_message_early_by_a_few_ms_of_another_host_s_clock_is_attempted(
    runtime: Runtime, clock: FakeClock
) -> None:
    """Planned (or its retry set) by a process whose clock is ahead, or delivered by a
    Celery ETA a little before this worker's clock: refused, it waited for the sweep."""
    delivery_id = planned_at(runtime, clock() + 5)
    assert claimed(runtime, delivery_id, clock())


def test_a_message_a_backoff_early_is_refused(runtime: Runtime, clock: FakeClock) -> None:
    delivery_id = planned_at(runtime, clock() + deliveries.ON_TIME_MS + 1000)
    assert not claimed(runtime, delivery_id, clock())
    assert claimed(runtime, delivery_id, clock.advance(1000))


def test_an_escalation_due_after_its_request_was_decided_is_skipped_with_its_reason(
    runtime: Runtime, clock: FakeClock
) -> None:
    """Not sent, and counted as never attempted: its request is no longer pending."""
    runtime.keys.create("approver", ["approver"])
    result = runtime.dispatcher.submit("agent", "high_echo", {"n": 1})
    assert result.request_id is not None and result.call_id is not None
    with runtime.store.transaction() as conn:
        (planned,) = deliveries.plan(
            conn,
            request_id=result.request_id,
            call_id=result.call_id,
            tool="high_echo",
            event=NotifyEvent.ESCALATED,
            channels=[("hook", "webhook")],
            now=clock(),
        )
    answer = Gate(runtime, runtime.notifier()).decide(result.request_id, "approver", "deny")
    assert answer.ok and answer.status == "denied"

    assert runtime.courier.attempt_many([planned.id]).outcome is NotifyOutcome.SKIPPED
    with runtime.store.reading() as conn:
        delivery = deliveries.get(conn, planned.id)
    assert delivery is not None
    assert (delivery.status, delivery.attempts, delivery.last_error) == (
        DeliveryStatus.SKIPPED,
        0,
        "not sent: the request is no longer pending",
    )
