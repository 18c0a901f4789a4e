"""The approval inbox in a real headless Chromium (Debian's), driven by Playwright."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..support.calls import decide, result, submit_pending
from ..support.launcher import REPO
from ..support.stack import Stack

playwright_sync = pytest.importorskip("playwright.sync_api")

HOSTILE = {
    "note": "<script>window.__pwned = 1</script>",
    "img": '<img src=x onerror="window.__pwned = 2">',
    "close": "</pre><b id=injected>bold</b>",
}
SCREENSHOT = REPO / "docs" / "inbox.png"
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def sign_in(page: Any, stack: Stack, key: str = "approver") -> None:
    page.goto(f"{stack.base_url}/ui/")
    page.fill("#key", stack.keys[key])
    page.click("button[type=submit]")


def card(page: Any, request_id: str) -> Any:
    return page.locator(f'article[data-request-id="{request_id}"]')


# inbox.js reloads the page when the pending set changes (other tests' requests come and go).
# A script run during a reload fails, or reads a document whose stylesheet has not arrived
# (unstyled, so as wide as its longest line). So each check runs as one script, only on a
# document that has finished loading with the request on it, and is retried otherwise.
ON_A_LOADED_INBOX = """(id) => {
  if (document.readyState !== "complete") return null;
  if (!document.querySelector(`article[data-request-id="${id}"]`)) return null;
  return {value: (CHECK)()};
}"""


def check_loaded_inbox(page: Any, request_id: str, check: str) -> Any:
    """What the JavaScript function `check` returns on the inbox showing `request_id`."""
    script = ON_A_LOADED_INBOX.replace("CHECK", check)
    for _ in range(50):
        try:
            page.wait_for_load_state("load")
            settled = page.evaluate(script, request_id)
        except playwright_sync.Error:  # the page reloaded under the script
            settled = None
        if settled is not None:
            return settled["value"]
        page.wait_for_timeout(100)
    raise AssertionError(f"the inbox never settled with {request_id} on it")


def test_approver_signs_in_sees_a_request_approves_it_and_the_call_runs(
    stack: Stack, page: Any
) -> None:
    call = submit_pending(stack, args={"to": "alice", "amount": 12})
    sign_in(page, stack)
    item = card(page, call["request_id"])
    item.wait_for()
    assert item.locator(".tool").inner_text() == "high_echo"
    assert item.locator(".requester").inner_text() == "agent"
    assert '"to": "alice"' in item.locator("pre.args").inner_text()
    assert item.locator(".risk").inner_text() == "high"
    item.locator("input[name=reason]").fill("looks right")
    item.locator("button[value=approve]").click()
    page.locator("#flash").wait_for()
    assert f"{call['request_id']}: approved" in page.locator("#flash").inner_text()
    assert result(stack, call["call_id"])["status"] == "succeeded"
    history = page.locator("table.history").inner_text()
    assert call["request_id"] in history and "looks right" in history


def test_approver_denies_with_a_reason(stack: Stack, page: Any) -> None:
    call = submit_pending(stack)
    sign_in(page, stack)
    item = card(page, call["request_id"])
    item.locator("input[name=reason]").fill("wrong account")
    item.locator("button[value=deny]").click()
    page.locator("#flash").wait_for()
    assert f"{call['request_id']}: denied" in page.locator("#flash").inner_text()
    assert result(stack, call["call_id"], 0)["status"] == "denied"


def test_enter_in_a_reason_field_decides_nothing(stack: Stack, page: Any) -> None:
    one, *selected = [submit_pending(stack, args={"rm": "-rf /", "i": i}) for i in range(3)]
    sign_in(page, stack)
    reason = card(page, one["request_id"]).locator("input[name=reason]")
    reason.fill("no: this deletes everything")
    reason.press("Enter")
    page.wait_for_timeout(1000)
    assert result(stack, one["call_id"], 0)["status"] == "pending"
    for call in selected:
        card(page, call["request_id"]).locator("input[type=checkbox]").check()
    page.fill("#bulk-reason", "none of these")
    page.press("#bulk-reason", "Enter")
    page.wait_for_timeout(1000)
    assert [result(stack, call["call_id"], 0)["status"] for call in selected] == ["pending"] * 2
    assert page.locator("#flash").count() == 0
    # The reason typed is still there for the button meant.
    card(page, one["request_id"]).locator("button[value=deny]").click()
    page.locator("#flash").wait_for()
    assert f"{one['request_id']}: denied" in page.locator("#flash").inner_text()
    assert result(stack, one["call_id"], 0)["status"] == "denied"


def test_several_selected_requests_are_each_decided(stack: Stack, page: Any) -> None:
    calls = [submit_pending(stack, args={"i": i}) for i in range(3)]
    sign_in(page, stack)
    for call in calls[:2]:
        card(page, call["request_id"]).locator("input[type=checkbox]").check()
    page.fill("#bulk-reason", "batch ok")
    page.click("#bulk button[value=approve]")
    page.locator("#flash").wait_for()
    flash = page.locator("#flash").inner_text()
    for call in calls[:2]:
        assert f"{call['request_id']}: approved" in flash
        assert result(stack, call["call_id"])["status"] == "succeeded"
    assert calls[2]["request_id"] not in flash
    assert result(stack, calls[2]["call_id"], 0)["status"] == "pending"
    with stack.client("operator") as http:
        rows = http.get("/v1/audit", params={"event": "approved", "limit": 1000}).json()["rows"]
    decided = {row["request_id"] for row in rows if row["actor"] == "approver"}
    assert {c["request_id"] for c in calls[:2]} <= decided


def test_hostile_arguments_stay_inert(stack: Stack, page: Any, tmp_path: Path) -> None:
    call = submit_pending(stack, args=HOSTILE)
    sign_in(page, stack)
    item = card(page, call["request_id"])
    item.wait_for()
    text = item.locator("pre.args").inner_text()
    for value in HOSTILE.values():
        assert value.replace('"', '\\"') in text
    assert check_loaded_inbox(page, call["request_id"], "() => window.__pwned === undefined")
    assert page.locator("#injected").count() == 0
    assert page.dialogs == []
    # The README's screenshot; refreshed with TOOLROUTER_UPDATE_SCREENSHOT=1.
    target = (
        SCREENSHOT
        if os.environ.get("TOOLROUTER_UPDATE_SCREENSHOT") == "1"
        else (tmp_path / "inbox.png")
    )
    page.screenshot(path=str(target), full_page=False)
    assert target.stat().st_size > 0


def test_an_agent_key_cannot_use_the_inbox(stack: Stack, page: Any) -> None:
    sign_in(page, stack, key="agent")
    assert page.locator("h1").inner_text() == "Not allowed"
    response = page.request.get(f"{stack.base_url}/ui/")
    assert response.status in (200, 403)


def test_a_bad_key_is_refused_and_sign_out_ends_the_session(stack: Stack, page: Any) -> None:
    page.goto(f"{stack.base_url}/ui/")
    page.fill("#key", "trk_not-a-key")
    page.click("button[type=submit]")
    assert "not accepted" in page.locator(".error").inner_text()
    sign_in(page, stack)
    assert re.search("Waiting for you", page.locator("h1").first.inner_text())
    page.click("button.link")
    page.locator("#key").wait_for()
    assert page.context.cookies() == [] or all(
        c["name"] != "tr_session" for c in page.context.cookies()
    )


def test_the_list_refreshes_by_itself_when_a_request_arrives(stack: Stack, page: Any) -> None:
    sign_in(page, stack)
    call = submit_pending(stack, args={"late": True})
    card(page, call["request_id"]).wait_for(timeout=15_000)


def test_a_click_as_a_reload_moves_another_request_under_it_decides_nothing(
    stack: Stack, browser: Any
) -> None:
    # Earlier tests' requests denied, so these three lead the page, which stays at its top.
    with stack.client("approver") as http:
        for left in http.get("/v1/approvals").json()["requests"]:
            decide(stack, left["request_id"], "deny")
    decoy, meant, other = (submit_pending(stack, args={"step": n}) for n in range(3))
    # Tall enough for all three at the page's top: scrolled, Chromium keeps the content it
    # showed in place across a reload, while at the top it does not.
    page = browser.new_page(viewport={"width": 1100, "height": 2000})
    try:
        sign_in(page, stack)
        approve = card(page, meant["request_id"]).locator("button[value=approve]")
        box = approve.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        # The agent withdraws the request above; the page reloads under the resting pointer.
        with stack.client("agent") as http:
            assert http.delete(f"/v1/calls/{decoy['call_id']}").status_code == 200
        card(page, decoy["request_id"]).wait_for(state="detached", timeout=15_000)
        moved = card(page, other["request_id"]).locator("button[value=approve]")
        for _ in range(250):
            now = moved.bounding_box()
            if now and abs(now["y"] + now["height"] / 2 - y) < now["height"] / 2:
                break
            page.wait_for_timeout(20)
        else:
            raise AssertionError("the next request never moved under the pointer")
        # Once the new page is on screen (Chromium drops clicks before its first paint).
        page.evaluate(PAINTED)
        page.mouse.click(x, y)
        page.wait_for_timeout(1500)
        assert result(stack, other["call_id"], 0)["status"] == "pending"
        assert page.locator("#flash").count() == 0
        # A second later the buttons take clicks again.
        approve.click()
        page.locator("#flash").wait_for()
        assert f"{meant['request_id']}: approved" in page.locator("#flash").inner_text()
        assert result(stack, other["call_id"], 0)["status"] == "pending"
    finally:
        page.close()
        decide(stack, other["request_id"], "deny")


def test_forms_without_the_csrf_token_are_refused(stack: Stack) -> None:
    call = submit_pending(stack)
    with httpx.Client(base_url=stack.base_url) as http:
        # As a browser posts the sign-in form: from the inbox's own origin.
        signed = http.post(
            "/ui/login", data={"key": stack.keys["approver"]}, headers={"Origin": stack.base_url}
        )
        assert signed.status_code == 303
        cookie = signed.cookies.get("tr_session")
        assert cookie and "httponly" in signed.headers["set-cookie"].lower()
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        # The client keeps the session cookie; only the CSRF token is missing.
        response = http.post(
            "/ui/decide", data={"decision": "approve", "request_id": call["request_id"]}
        )
        assert response.status_code == 403
        page = http.get("/ui/")
        assert 'name="csrf"' in page.text
    assert result(stack, call["call_id"], 0)["status"] == "pending"
    headers = page.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert stack.keys["approver"] not in page.text


def test_a_tampered_or_expired_session_cookie_is_signed_out(stack: Stack) -> None:
    for value in ["junk", "YQ.1.abc", "dHJr.99999999999999.0000"]:
        with httpx.Client(base_url=stack.base_url, cookies={"tr_session": value}) as http:
            page = http.get("/ui/")
        assert page.status_code == 200 and 'id="key"' in page.text


def test_the_inbox_fits_a_phone(stack: Stack, browser: Any) -> None:
    call = submit_pending(stack, args={"long": "x" * 300})
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True)
    try:
        page = context.new_page()
        sign_in(page, stack)
        card(page, call["request_id"]).wait_for()
        measured = check_loaded_inbox(
            page,
            call["request_id"],
            """() => ({
              overflow: document.documentElement.scrollWidth - window.innerWidth,
              wide: Array.from(document.querySelectorAll("body *"))
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                .slice(0, 3).map(e => `${e.tagName}.${e.className} ${e.textContent.slice(0, 60)}`),
            })""",
        )
        assert measured["overflow"] <= 0, measured["wide"]
    finally:
        context.close()


def open_edit(page: Any, stack: Stack, call: dict[str, Any], first: bool = True) -> Any:
    """The edit form of the call's card, opened (its textarea prefilled); signs in first."""
    if first:
        sign_in(page, stack)
    item = card(page, call["request_id"])
    item.locator("details.edit summary").click()
    textarea = item.locator("details.edit textarea[name=args]")
    textarea.wait_for()
    return textarea


def test_an_approver_edits_the_arguments_reviews_the_diff_and_the_edit_runs(
    stack: Stack, page: Any
) -> None:
    call = submit_pending(stack, "edit_wire", args={"amount": 5000, "to": "bob"})
    textarea = open_edit(page, stack, call)
    assert json.loads(textarea.input_value()) == {"amount": 5000, "to": "bob"}
    textarea.fill(json.dumps({"amount": 4000, "to": "carol"}, indent=2))
    card(page, call["request_id"]).locator("details.edit button[type=submit]").click()
    diff = page.locator("#diff")
    diff.wait_for()
    assert [d.inner_text() for d in diff.locator("del").all()] == [
        '-  "amount": 5000,',
        '-  "to": "bob"',
    ]
    assert [a.inner_text() for a in diff.locator("ins").all()] == [
        '+  "amount": 4000,',
        '+  "to": "carol"',
    ]
    # Nothing is sent before the approver confirms.
    assert result(stack, call["call_id"], 0)["status"] == "pending"
    page.fill("#confirm-reason", "fixed payee")
    page.click("#confirm-approve")
    page.locator("#flash").wait_for()
    assert f"{call['request_id']}: approved (edited)" in page.locator("#flash").inner_text()
    edited = {"amount": 4000, "to": "carol"}
    outcome = result(stack, call["call_id"])
    assert (outcome["status"], outcome["value"]) == ("succeeded", edited)
    assert (outcome["edited"], outcome["args"], outcome["edited_by"]) == (True, edited, "approver")
    assert "edited by approver" in page.locator("table.history").inner_text()


def shows_error(page: Any, text: str, error: str) -> None:
    page.locator("#edit-error").wait_for()
    assert error in page.locator("#edit-error").inner_text()
    assert page.locator("#edit-args").input_value() == text
    assert page.locator("#edit-args").get_attribute("aria-invalid") == "true"
    assert page.locator("#diff").count() == 0 and page.locator("#confirm").count() == 0


def test_invalid_json_in_an_edit_is_shown_inline_and_nothing_is_sent(
    stack: Stack, page: Any
) -> None:
    call = submit_pending(stack, "edit_wire", args={"amount": 5000, "to": "bob"})
    textarea = open_edit(page, stack, call)
    textarea.fill('{"amount": 4000,')
    card(page, call["request_id"]).locator("details.edit button[type=submit]").click()
    shows_error(page, '{"amount": 4000,', "not valid JSON")
    # The error page keeps the form: the next try is made from there.
    page.fill("#edit-args", "[1, 2]")
    page.click("#edit button[type=submit]")
    shows_error(page, "[1, 2]", "JSON object")
    assert result(stack, call["call_id"], 0)["status"] == "pending"
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert request["args"] == {"amount": 5000, "to": "bob"} and "edited_by" not in request


def test_a_refused_edit_is_shown_at_review_and_a_stale_review_is_not_approved(
    stack: Stack, page: Any
) -> None:
    # Over 10000: two approvals, so another approver's edit leaves it pending.
    call = submit_pending(stack, "edit_wire", args={"amount": 20000, "to": "bob"})
    textarea = open_edit(page, stack, call)
    refused = json.dumps({"amount": 20000, "to": "blocked-account"})
    textarea.fill(refused)
    card(page, call["request_id"]).locator("details.edit button[type=submit]").click()
    # Checked at review as a submission of them would be: nothing to confirm, nothing sent.
    shows_error(page, refused, "denied by rule deny_if")
    page.goto(f"{stack.base_url}/ui/")
    # Reviewed, then someone else edits: the confirmation is refused, not applied blindly.
    textarea = open_edit(page, stack, call, first=False)
    textarea.fill(json.dumps({"amount": 3000, "to": "carol"}))
    card(page, call["request_id"]).locator("details.edit button[type=submit]").click()
    page.locator("#diff").wait_for()
    other = decide(stack, call["request_id"], key="approver2", args={"amount": 15000, "to": "dan"})
    assert other.status_code == 200, other.text
    page.click("#confirm-approve")
    page.locator("#flash").wait_for()
    assert "changed since you opened them" in page.locator("#flash").inner_text()
    with stack.client("approver") as http:
        request = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
    assert request["args"] == {"amount": 15000, "to": "dan"} and request["status"] == "pending"


def test_the_edit_forms_need_the_session_and_its_csrf_token(stack: Stack) -> None:
    call = submit_pending(stack, "edit_wire", args={"amount": 5000, "to": "bob"})
    edited = json.dumps({"amount": 4000, "to": "carol"})
    with stack.client("approver") as http:
        digest = http.get(f"/v1/approvals/{call['request_id']}").json()["request"]["args_sha256"]
    form = {"request_id": call["request_id"], "args_sha256": digest, "args": edited}
    with httpx.Client(base_url=stack.base_url) as http:
        for path in ("/ui/edit/review", "/ui/edit/approve"):
            # No session: back to sign-in, nothing done.
            anonymous = http.post(path, data=form)
            assert anonymous.status_code == 303 and anonymous.headers["location"] == "/ui/"
            assert http.get(path).status_code == 405
        signed = http.post(
            "/ui/login", data={"key": stack.keys["approver"]}, headers={"Origin": stack.base_url}
        )
        assert signed.status_code == 303
        for path in ("/ui/edit/review", "/ui/edit/approve"):
            assert http.post(path, data=form).status_code == 403
            assert http.post(path, data={**form, "csrf": "forged"}).status_code == 403
        token = re.search(r'name="csrf" value="([^"]+)"', http.get("/ui/").text)
        assert token is not None
        reviewed = http.post("/ui/edit/review", data={**form, "csrf": token.group(1)})
        assert reviewed.status_code == 200 and 'id="diff"' in reviewed.text
    assert result(stack, call["call_id"], 0)["status"] == "pending"


def test_a_notification_link_opens_its_request_after_signing_in(stack: Stack, page: Any) -> None:
    """The link names the request after `#`, which the server never sees: signing in keeps
    it, so the inbox opens at that request."""
    call = submit_pending(stack, args={"from": "a notification link"})
    anchor = f"#{call['request_id']}"
    page.goto(f"{stack.base_url}/ui/{anchor}")
    page.fill("#key", stack.keys["approver"])
    page.click("button[type=submit]")
    card(page, call["request_id"]).wait_for()
    assert page.url == f"{stack.base_url}/ui/{anchor}"
    targeted = check_loaded_inbox(
        page, call["request_id"], "() => document.querySelector(':target')?.dataset.requestId"
    )
    assert targeted == call["request_id"]
