"""The inbox's count when more requests wait than one page lists."""

from __future__ import annotations

import httpx

from router.ui.routes import INBOX_SHOWS

from ..support.inbox import sign_in_with
from ..support.stack import Stack


def test_the_count_says_more_wait_than_the_page_lists(stack: Stack) -> None:
    made: list[str] = []
    try:
        with stack.client("agent") as http:
            for n in range(INBOX_SHOWS + 1):
                answer = http.post("/v1/calls", json={"tool": "high_echo", "args": {"n": n}})
                assert answer.json()["status"] == "pending", answer.text
                made.append(answer.json()["request_id"])
        with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
            assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
            page = inbox.get("/ui/").text
            ids = inbox.get("/ui/pending.json").json()["request_ids"]
        assert f'id="pending-count">{INBOX_SHOWS}+</span>' in page
        assert f"The oldest {INBOX_SHOWS} are listed; more wait behind them." in page
        assert page.count("data-request-id=") == INBOX_SHOWS
        assert len(ids) == INBOX_SHOWS
    finally:
        # The stack is shared: the next test's requests must not wait behind these.
        with stack.client("approver") as http:
            for request_id in made:
                http.post(f"/v1/approvals/{request_id}/deny", json={"reason": "test over"})
