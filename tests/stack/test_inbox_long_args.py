"""Long arguments on the inbox: the list cuts them, so one agent cannot fill every
approver's page, and offers no approval of arguments it did not show; the request's own
page shows them whole, and is where such a request is approved."""

from __future__ import annotations

import html
import re

import httpx

from router.canonical import args_digest
from router.ui.cards import ARGS_SHOWN
from router.ui.routes import CUT

from ..support.calls import decide, result, submit_pending
from ..support.inbox import csrf_of, sign_in_with
from ..support.stack import Stack

# Quotes: each is escaped twice on a page (JSON, then HTML), the worst case for its size.
LONG = {"blob": '"' * 20_000}


def card_of(page: str, request_id: str) -> str:
    match = re.search(rf'<article [^>]*data-request-id="{request_id}".*?</article>', page, re.S)
    assert match, page[:500]
    return match.group(0)


def test_long_arguments_are_cut_on_the_list_and_whole_on_the_requests_page(
    stack: Stack,
) -> None:
    long = submit_pending(stack, args=LONG)
    short = submit_pending(stack, args={"n": 1})
    with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
        assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
        listed = inbox.get("/ui/")
        cut = card_of(listed.text, long["request_id"])
        # Cut to a bounded size, shown once, and without an approval or an edit.
        assert len(cut) < 12 * ARGS_SHOWN, len(cut)
        assert f'href="/ui/requests/{long["request_id"]}"' in cut
        assert 'value="approve"' not in cut and "<textarea" not in cut
        assert 'value="deny"' in cut
        assert 'value="approve"' in card_of(listed.text, short["request_id"])

        # Approving it from the list (ticked for a bulk decision) is refused by name.
        form = {"decision": "approve", "csrf": csrf_of(listed), "request_id": long["request_id"]}
        inbox.post("/ui/decide", data={**form, f"cut.{long['request_id']}": "1"})
        flash = html.unescape(inbox.get("/ui/").text)
        assert f"{long['request_id']}: {CUT}. Nothing was sent." in flash

        whole = inbox.get(f"/ui/requests/{long['request_id']}")
        assert whole.status_code == 200
        shown = card_of(whole.text, long["request_id"])
        assert 'value="approve"' in shown and "<textarea" in shown
        assert html.unescape(shown).count('\\"') == 2 * len(LONG["blob"])  # text and edit
        assert f'value="{args_digest(LONG)}"' in shown
        decided = inbox.post(
            "/ui/decide",
            data={
                "decision": "approve",
                "csrf": csrf_of(whole),
                "request_id": long["request_id"],
                f"args_sha256.{long['request_id']}": args_digest(LONG),
            },
        )
        assert decided.status_code == 303
        assert f"{long['request_id']}: approved" in html.unescape(inbox.get("/ui/").text)
        assert result(stack, long["call_id"])["value"] == LONG

        # Decided now: its page says so, as it says of a request never issued.
        gone = inbox.get(f"/ui/requests/{long['request_id']}")
        assert gone.status_code == 404
        assert f"{long['request_id']} is no longer pending: approved" in gone.text
        unknown = inbox.get("/ui/requests/req-" + "0" * 32)
        assert unknown.status_code == 404 and "unknown request: req-" in unknown.text
        inbox.post(
            "/ui/decide",
            data={"decision": "deny", "csrf": csrf_of(unknown), "request_id": short["request_id"]},
        )


def test_a_requests_page_shows_only_what_the_list_would(stack: Stack) -> None:
    finance = submit_pending(stack, tool="finance_wire", args={"to": "x", "amount": 1})
    made = [finance]
    try:
        with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
            path = f"/ui/requests/{finance['request_id']}"
            assert 'id="key"' in inbox.get(path).text  # signed out: the sign-in form
            assert sign_in_with(inbox, stack.keys["approver"]).status_code == 303
            hidden = inbox.get(path)
            assert hidden.status_code == 404
            assert f"unknown request: {finance['request_id']}" in hidden.text
            assert "finance" not in hidden.text
        with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
            assert sign_in_with(inbox, stack.keys["agent"]).status_code == 403
        # A request of two approvers, approved once by this key: the list no longer shows it
        # to this key, nor does its page; the second approver still sees it.
        two = submit_pending(stack, tool="two_man", args={"n": 2})
        made.append(two)
        assert decide(stack, two["request_id"]).status_code == 200
        for key, status in (("approver", 404), ("approver2", 200)):
            with httpx.Client(base_url=stack.base_url, timeout=30) as inbox:
                assert sign_in_with(inbox, stack.keys[key]).status_code == 303
                assert inbox.get(f"/ui/requests/{two['request_id']}").status_code == status
    finally:
        with stack.client("operator") as http:
            for pending in made:
                http.post(f"/v1/approvals/{pending['request_id']}/deny", json={"reason": "over"})
