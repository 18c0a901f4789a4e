"""Sign-out from every inbox page that offers it, posted as a browser posts the page's own
form: from the page refusing a key that is no approver, the session the browser holds
ends."""

from __future__ import annotations

import re

import httpx

from ..support.inbox import (
    browser_headers,
    is_login_page,
    session_rows,
    sign_in_with,
)
from ..support.stack import Stack
from ..support.trust import new_key


def sign_out_form(page: httpx.Response) -> dict[str, str]:
    """The fields of the page's sign-out form, as a browser would post them."""
    form = re.search(r'<form[^>]*action="/ui/logout"[^>]*>(.*?)</form>', page.text, re.S)
    assert form, page.text[:800]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form[1]))


def test_the_not_allowed_page_of_a_refused_key_signs_out_the_session_the_browser_holds(
    stack: Stack,
) -> None:
    approver, approver_token = new_key(stack, "approver")
    agent, agent_token = new_key(stack, "agent")
    with httpx.Client(base_url=stack.base_url, timeout=30) as browser:
        assert sign_in_with(browser, approver_token).status_code == 303
        refused = sign_in_with(browser, agent_token)
        assert refused.status_code == 403 and "Not allowed" in refused.text
        # The browser is still signed in, as the approver: the page says so, not the agent.
        assert f"signed in as <b>{agent}</b>" not in refused.text
        assert f"signed in as <b>{approver}</b>" in refused.text
        out = browser.post(
            "/ui/logout", data=sign_out_form(refused), headers=browser_headers(stack)
        )
        assert out.status_code == 303, out.text[:500]
        assert is_login_page(browser.get("/ui/"))
    (ended,) = session_rows(stack, approver)
    assert ended.ended_at is not None


def test_the_stale_form_page_signs_out(stack: Stack) -> None:
    name, token = new_key(stack, "approver")
    with httpx.Client(base_url=stack.base_url, timeout=30) as browser:
        assert sign_in_with(browser, token).status_code == 303
        stale = browser.post(
            "/ui/decide", data={"csrf": "stale", "decision": "deny"}, headers=browser_headers(stack)
        )
        assert stale.status_code == 403 and "The form was stale" in stale.text
        out = browser.post("/ui/logout", data=sign_out_form(stale), headers=browser_headers(stack))
        assert out.status_code == 303, out.text[:500]
        assert is_login_page(browser.get("/ui/"))
    (ended,) = session_rows(stack, name)
    assert ended.ended_at is not None
