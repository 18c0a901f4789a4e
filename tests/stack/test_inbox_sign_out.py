"""Sign-out from every inbox page that offers it, posted as a browser posts the page's own
form: a session the inbox no longer serves (its key is no approver now) still ends."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from ..support.inbox import (
    browser_headers,
    inbox_page,
    is_login_page,
    second_api,
    session_cookie,
    session_rows,
    sign_in,
    sign_in_with,
)
from ..support.stack import Stack
from ..support.trust import SESSION_COOKIE, new_key

# The stack's tools, and one whose approvers are agents: it makes an agent key an approver.
AGENTS_APPROVE = """
tools:
  - {name: agents_approve, handler: "tests.fixture_tools:echo", risk: high, approvers: [agent]}
"""


def sign_out_form(page: httpx.Response) -> dict[str, str]:
    """The fields of the page's sign-out form, as a browser would post them."""
    form = re.search(r'<form[^>]*action="/ui/logout"[^>]*>(.*?)</form>', page.text, re.S)
    assert form, page.text[:800]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form[1]))


def test_a_key_no_longer_an_approver_signs_out_from_the_not_allowed_page(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = new_key(stack, "agent")
    config = tmp_path / "agents-approve.yaml"
    config.write_text(AGENTS_APPROVE, encoding="utf-8")
    # Signed in while a tool named agents among its approvers; the stack's tools do not.
    with second_api(stack, tmp_path / "api.log", TOOLROUTER_CONFIG=str(config)) as base_url:
        cookie = session_cookie(sign_in(base_url, token))
    page = inbox_page(stack.base_url, cookie)
    assert page.status_code == 403 and "Not allowed" in page.text
    assert f"signed in as <b>{name}</b>" in page.text
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        out = http.post(
            "/ui/logout",
            data=sign_out_form(page),
            headers={**browser_headers(stack), "Cookie": f"{SESSION_COOKIE}={cookie}"},
        )
    assert out.status_code == 303, out.text[:500]
    (ended,) = session_rows(stack, name)
    assert ended.ended_at is not None
    assert is_login_page(inbox_page(stack.base_url, cookie))


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
