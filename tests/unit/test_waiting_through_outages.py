"""A wait for a call outlives a re-check the database refused: that re-check tells nothing
yet, and the wait goes on to the call's outcome; only the read at the deadline may fail."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from router.errors import StoreUnavailable
from router.messaging import waiting
from router.messaging.completions import CompletionListener
from router.messaging.namespace import Namespace
from router.results import CallResult
from router.status import CallStatus
from router.trust.keyring import KeyRing

CALL_ID = "call_01a24f711e4f73e45d1c224deff38665"


@dataclass
class Row:
    """As much of a call's row as a wait reads."""

    status: str

    def result(self) -> CallResult:
        return CallResult(status=self.status, call_id=CALL_ID, tool="echo")


def listener() -> CompletionListener:
    # Never subscribed: no completion comes, every wake-up is a re-check.
    return CompletionListener("redis://unused", Namespace("tr-test"), KeyRing(b"k" * 32))


def test_a_refused_recheck_does_not_end_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "RECHECK_S", 0.01)
    answers = [StoreUnavailable("database: connection lost"), Row(CallStatus.SUCCEEDED)]

    def load() -> Row:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    result = asyncio.run(
        waiting.wait_for_call(listener(), CALL_ID, load, 30, known_unfinished=True)
    )  # type: ignore[arg-type]
    assert result.status == CallStatus.SUCCEEDED and answers == []


def test_the_read_at_the_deadline_still_says_the_database_is_gone() -> None:
    def load() -> Row:
        raise StoreUnavailable("database: connection lost")

    with pytest.raises(StoreUnavailable):
        asyncio.run(waiting.wait_for_call(listener(), CALL_ID, load, 0.05, known_unfinished=True))  # type: ignore[arg-type]
