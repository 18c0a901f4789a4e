"""What the inbox's forms do with input no submission would pass: refused on the page,
with nothing sent to the approval worker, and never an internal error."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from router.approval.model import MAX_REASON_CHARS

from ..support.calls import submit_pending
from ..support.inbox import csrf_of, sign_in_with
from ..support.stack import Stack


@pytest.fixture
def inbox(stack: Stack) -> Iterator[httpx.Client]:
    """The approver, signed in to the inbox."""
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        assert sign_in_with(http, stack.keys["approver"]).status_code == 303
        yield http


def request_of(stack: Stack, request_id: str) -> dict[str, Any]:
    with stack.client("operator") as http:
        return http.get(f"/v1/approvals/{request_id}").json()["request"]  # type: ignore[no-any-return]


def settle(stack: Stack, request_id: str) -> None:
    """Deny what a test left pending: the stack is shared, and later lists start oldest."""
    with stack.client("approver") as http:
        answer = http.post(f"/v1/approvals/{request_id}/deny", json={"reason": "test over"})
    assert answer.status_code == 200, answer.text


def edit_form(inbox: httpx.Client, call: dict[str, Any], args: str) -> dict[str, str]:
    request = call["request_id"]
    return {
        "csrf": csrf_of(inbox.get("/ui/")),
        "request_id": request,
        "args_sha256": call["args_sha256"],
        "args": args,
    }


def pending_wire(stack: Stack, args: dict[str, Any]) -> dict[str, Any]:
    call = submit_pending(stack, "edit_wire", args=args)
    return {**call, "args_sha256": request_of(stack, call["request_id"])["args_sha256"]}


def test_an_edit_with_a_number_json_cannot_hold_is_refused_on_the_page(
    stack: Stack, inbox: httpx.Client
) -> None:
    call = pending_wire(stack, {"amount": 5000, "to": "bob"})
    logged_before = len(stack.log("api"))
    form = edit_form(inbox, call, '{"amount": 1e400, "to": "bob"}')
    review = inbox.post("/ui/edit/review", data=form)
    assert review.status_code == 422, review.text[:500]
    assert "arguments are not JSON" in html.unescape(review.text)
    approve = inbox.post("/ui/edit/approve", data={**form, "reason": "typo"})
    assert approve.status_code == 303
    flash = html.unescape(inbox.get("/ui/").text)
    assert "edited arguments refused: invalid arguments: arguments are not JSON" in flash
    assert "Nothing was sent." in flash
    request = request_of(stack, call["request_id"])
    assert (request["status"], request["decisions"]) == ("pending", [])
    assert "Traceback" not in stack.log("api")[logged_before:]
    settle(stack, call["request_id"])


def test_arguments_holding_a_lone_surrogate_can_be_reviewed_and_edited(
    stack: Stack, inbox: httpx.Client
) -> None:
    """JSON may escape a lone surrogate, which no page can hold as a character: the review
    shows its escape."""
    with stack.client("agent") as http:
        # As an agent's JSON escapes it; a client encoding UTF-8 could not send it at all.
        body = '{"tool": "edit_wire", "args": {"amount": 5000, "to": "bo\\ud800b"}}'
        call = http.post("/v1/calls", content=body).json()
    assert call["status"] == "pending", call
    call["args_sha256"] = request_of(stack, call["request_id"])["args_sha256"]
    form = edit_form(inbox, call, '{"amount": 4000, "to": "bo\\ud800b"}')
    review = inbox.post("/ui/edit/review", data=form)
    assert review.status_code == 200, review.text[:500]
    assert "bo\\ud800b" in review.text
    approve = inbox.post("/ui/edit/approve", data=form)
    assert approve.status_code == 303
    request = request_of(stack, call["request_id"])
    assert request["args"] == {"amount": 4000, "to": "bo\ud800b"}
    assert request["edited_by"] == "approver"


def denied_with_a_bad_reason(
    stack: Stack, inbox: httpx.Client, n: int, refusal: str, **sent: Any
) -> None:
    """A denial posted with ``sent`` (the reason as form data or as a file) is refused
    with ``refusal`` on the inbox, and its request stays pending with no decision."""
    call = submit_pending(stack, "high_echo", args={"n": n})
    form = {
        "decision": "deny",
        "csrf": csrf_of(inbox.get("/ui/")),
        "request_id": call["request_id"],
        **sent.pop("data", {}),
    }
    assert inbox.post("/ui/decide", data=form, **sent).status_code == 303
    assert refusal in html.unescape(inbox.get("/ui/").text)
    request = request_of(stack, call["request_id"])
    assert (request["status"], request["decisions"]) == ("pending", [])
    settle(stack, call["request_id"])


def test_a_file_in_the_reasons_place_is_refused_and_nothing_is_decided(
    stack: Stack, inbox: httpx.Client
) -> None:
    denied_with_a_bad_reason(
        stack,
        inbox,
        1,
        "The reason must be text. Nothing was sent.",
        files={"reason": ("hostname", b"box\n")},
    )


def test_a_reason_past_the_limit_is_refused_not_cut_and_nothing_is_decided(
    stack: Stack, inbox: httpx.Client
) -> None:
    """A browser stops typing at the limit; a script posting the form does not."""
    denied_with_a_bad_reason(
        stack,
        inbox,
        2,
        f"over the limit of {MAX_REASON_CHARS}; shorten it. Nothing was sent.",
        data={"reason": "x" * (MAX_REASON_CHARS + 1)},
    )
