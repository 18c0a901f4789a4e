"""The inbox with more requests than one page lists or one decision may take."""

from __future__ import annotations

import html

import httpx

from router.canonical import args_digest
from router.ui.routes import FLASH_LINES, INBOX_SHOWS, MAX_SELECTED

from ..support.inbox import csrf_of, sign_in_with
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


def test_a_bulk_decision_reports_every_refusal_and_sends_no_more_than_it_may(
    stack: Stack,
) -> None:
    with stack.client("agent") as http:
        made = [
            http.post("/v1/calls", json={"tool": "high_echo", "args": {"bulk": n}}).json()
            for n in range(FLASH_LINES + 1)
        ]
    unknown = "req-" + "0" * 32
    with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
        assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
        form = {"decision": "deny", "csrf": csrf_of(inbox.get("/ui/")), "reason": "bulk"}
        too_many = [f"req-{n:032x}" for n in range(MAX_SELECTED + 1)]
        inbox.post("/ui/decide", data={**form, "request_id": too_many})
        flash = html.unescape(inbox.get("/ui/").text)
        assert f"Select at most {MAX_SELECTED} requests at a time. Nothing was sent." in flash
        chosen = [m["request_id"] for m in made] + [unknown]
        # The hash of each request's arguments, as the page shows them (some may be listed
        # below the oldest shown, behind other tests' requests).
        shown = {
            f"args_sha256.{m['request_id']}": args_digest({"bulk": n}) for n, m in enumerate(made)
        }
        inbox.post("/ui/decide", data={**form, **shown, "request_id": chosen})
        flash = html.unescape(inbox.get("/ui/").text)
    assert f"{len(made)} of {len(chosen)} decided as asked" in flash
    assert f"{unknown}: unknown request" in flash
    # An id posted with a control character in it is echoed as its escape.
    with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
        assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
        form = {"decision": "deny", "csrf": csrf_of(inbox.get("/ui/")), "request_id": "req-\x00"}
        inbox.post("/ui/decide", data=form)
        page = inbox.get("/ui/").text
    assert "\x00" not in page and "req-\\u0000: unknown request" in html.unescape(page)
    with stack.client("operator") as http:
        statuses = {
            http.get(f"/v1/approvals/{m['request_id']}").json()["request"]["status"] for m in made
        }
    assert statuses == {"denied"}
