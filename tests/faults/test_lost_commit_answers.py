"""An outcome's commit that lands in the database while its answer is lost on the way back
(the connection dropped after the server committed): the worker's next try finds its own
outcome there, and must count it as recorded, announced to the call's waiters, never as
fenced off by another attempt, and never appended to the audit log twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import Connection

from router.audit import log as audit
from router.db.store import Store
from router.errors import StoreUnavailable
from router.messaging.completions import CALL_DONE_CHANNEL, parse_completion
from router.status import AuditEvent, CallStatus
from workers.execution.ledger import Finished, Ledger
from workers.handlers import Outcome

from ..support.faults import PrivateStack, private_stack_in, status
from ..support.waiting import wait_for


@pytest.fixture
def private(tmp_path: Path) -> Iterator[PrivateStack]:
    with private_stack_in(tmp_path) as stack:
        yield stack


def answer_lost_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's next write transaction commits, then reports the connection lost."""
    real = store.transaction
    lost = [True]

    @contextmanager
    def transaction(*, durable: bool = True) -> Iterator[Connection]:
        with real(durable=durable) as conn:
            yield conn
        if lost:
            lost.clear()
            raise StoreUnavailable("database: server closed the connection unexpectedly")

    monkeypatch.setattr(store, "transaction", transaction)


def test_an_outcome_whose_commit_answer_was_lost_is_recorded_once_and_announced(
    private: PrivateStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = private.runtime
    submitted = runtime.dispatcher.submit("agent", "echo", {"text": "hello"})
    call_id = submitted.call_id
    assert call_id is not None, submitted
    notifier = runtime.notifier()
    ledger = Ledger(runtime, notifier, actor="test-worker")
    listener = redis.Redis.from_url(private.redis.url).pubsub()
    listener.subscribe(runtime.namespace.key(CALL_DONE_CHANNEL))
    try:
        with runtime.store.transaction() as conn:
            row, refusal = ledger.claim(conn, call_id, "echo")
        assert row is not None and refusal is None
        outcome = Outcome(ok=True, value_json=json.dumps({"text": "hello"}))
        done = Finished(row, outcome, CallStatus.SUCCEEDED, AuditEvent.OK, runtime.clock())

        answer_lost_once(runtime.store, monkeypatch)
        assert ledger.commit_finished([done]) == []

        heard: list[str] = []

        def announced() -> bool:
            message = listener.get_message(timeout=0.1)
            if message is not None and message["type"] == "message":
                parsed = parse_completion(message["data"], runtime.keyring)
                heard.append(parsed[0] if parsed else "unreadable")
            return call_id in heard

        wait_for(announced, 30, "the completion announced")
        assert status(runtime, call_id) == CallStatus.SUCCEEDED
        with runtime.store.reading() as conn:
            events = [entry["event"] for entry in audit.query(conn, call_id=call_id)]
        assert events == [AuditEvent.QUEUED, AuditEvent.OK]
    finally:
        listener.close()
        notifier.client.close()
