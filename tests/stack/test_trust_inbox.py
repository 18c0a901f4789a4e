"""Inbox sessions, attacked from outside against real processes on both databases: what the
cookie is, what it opens, how it ends, who may sign in from where and how often, and what
a decision's reason may hold.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import select as sql_select

from router.auth.sessions import FLASH_COOKIE
from router.db.schema import ui_sessions
from router.messaging.namespace import derive_namespace
from router.settings import Settings

from ..support import services
from ..support.calls import submit_pending
from ..support.chromium import CHROMIUM
from ..support.inbox import (
    browser_headers,
    csrf_of,
    inbox_page,
    is_inbox_of,
    is_login_page,
    second_api,
    session_cookie,
    session_rows,
    sign_in,
    sign_in_with,
)
from ..support.stack import Stack
from ..support.trust import (
    SESSION_COOKIE,
    TRUST_REDIS_DB,
    backend_of,
    new_key,
    runtime_of,
)


def test_behind_a_trusted_proxy_sign_ins_are_counted_by_the_forwarded_address(
    stack: Stack, tmp_path: Path, redis_base: str
) -> None:
    allowed = stack.settings.ui_login_failures_per_minute
    _, token = new_key(stack, "approver")
    guesser, approver = {"X-Forwarded-For": "10.9.9.9"}, {"X-Forwarded-For": "10.8.8.8"}
    with throttling_api(
        stack, tmp_path, redis_base, TOOLROUTER_TRUSTED_PROXIES="127.0.0.1"
    ) as base_url:
        failures = [
            sign_in(base_url, f"trk_guess-{i}", guesser).status_code for i in range(allowed)
        ]
        blocked = sign_in(base_url, token, guesser).status_code
        other_client = sign_in(base_url, token, approver).status_code
    assert failures == [401] * allowed
    assert (blocked, other_client) == (429, 303)


def test_fresh_ipv6_addresses_of_one_network_share_one_sign_in_count(
    stack: Stack, tmp_path: Path, redis_base: str
) -> None:
    """One IPv6 client holds a whole /64: a new address per guess is still one client."""
    allowed = stack.settings.ui_login_failures_per_minute
    with throttling_api(
        stack, tmp_path, redis_base, TOOLROUTER_TRUSTED_PROXIES="127.0.0.1"
    ) as base_url:
        answers = [
            sign_in(
                base_url, f"trk_guess-{i}", {"X-Forwarded-For": f"2001:db8:1:2::{i + 1:x}"}
            ).status_code
            for i in range(allowed + 2)
        ]
        mapped = sign_in(base_url, "trk_guess-v4", {"X-Forwarded-For": "::ffff:10.7.7.7"})
        other_network = sign_in(
            base_url, "trk_guess-other", {"X-Forwarded-For": "2001:db8:1:3::1"}
        ).status_code
    assert answers == [401] * allowed + [429, 429]
    assert (mapped.status_code, other_network) == (401, 401)
    print(f"[{backend_of(stack)}] guesses from fresh addresses of one /64 -> {answers}")


def test_over_https_the_inbox_cookies_are_secure_and_a_flash_shows_in_its_session_only(
    stack: Stack, tmp_path: Path
) -> None:
    with second_api(stack, tmp_path / "api.log", TOOLROUTER_TRUSTED_PROXIES="127.0.0.1") as url:
        # What a TLS proxy in front of the API passes on, and the browser's page's origin.
        https = {"X-Forwarded-Proto": "https", "Origin": url.replace("http:", "https:", 1)}
        signed_in = sign_in(url, stack.keys["approver"], https)
        other = session_cookie(sign_in(url, stack.keys["approver"], https))
        cookie = session_cookie(signed_in)
        with httpx.Client(base_url=url, timeout=30) as http:
            own = {"Cookie": f"{SESSION_COOKIE}={cookie}", **https}
            csrf = csrf_of(http.get("/ui/", headers=own))
            # No decision chosen: refused with a flash message, nothing decided.
            refused = http.post("/ui/decide", data={"csrf": csrf}, headers=own)
            flash = refused.cookies.get(FLASH_COOKIE)
            assert refused.status_code == 303 and flash, refused.headers
            shown = {
                session: http.get(
                    "/ui/",
                    headers={"Cookie": f"{SESSION_COOKIE}={session}; {FLASH_COOKIE}={flash}"},
                ).text
                for session in (cookie, other)
            }
    set_cookies = [signed_in.headers["set-cookie"], refused.headers["set-cookie"]]
    print(f"[{backend_of(stack)}] https cookies: {set_cookies}")
    assert all("Secure" in header for header in set_cookies), set_cookies
    assert "Choose approve or deny." in shown[cookie]
    assert "Choose approve or deny." not in shown[other]


def test_an_inbox_reason_is_kept_on_one_line_and_one_no_database_stores_is_refused(
    stack: Stack,
) -> None:
    refused_call = submit_pending(stack, "high_echo", args={"n": 1})
    kept_call = submit_pending(stack, "high_echo", args={"n": 2})
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        assert sign_in_with(http, stack.keys["approver"]).status_code == 303
        form = {"decision": "deny", "csrf": csrf_of(http.get("/ui/"))}
        # A NUL would reach the approval worker, whose write fails on PostgreSQL: the
        # approver would wait for its time-out and be told nothing was applied.
        refused = http.post(
            "/ui/decide",
            data={**form, "request_id": refused_call["request_id"], "reason": "a\x00b"},
        )
        assert refused.status_code == 303
        assert "U+0000 at character 2" in html.unescape(http.get("/ui/").text)
        kept = http.post(
            "/ui/decide",
            data={**form, "request_id": kept_call["request_id"], "reason": " wrong\r\n  payee "},
        )
        assert kept.status_code == 303
    with stack.client("operator") as http:
        untouched, decided = (
            http.get(f"/v1/approvals/{call['request_id']}").json()["request"]
            for call in (refused_call, kept_call)
        )
    assert (untouched["status"], untouched["decisions"]) == ("pending", [])
    assert decided["status"] == "denied", decided
    assert [d["reason"] for d in decided["decisions"]] == ["wrong payee"]


def test_an_inbox_session_is_an_opaque_id_stored_only_as_its_hash(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    cookie = session_cookie(sign_in(stack.base_url, token))
    # Not the key, nor the key in any reversible dress.
    assert cookie != token and token not in cookie
    padded = cookie + "=" * (-len(cookie) % 4)
    for decode in (base64.urlsafe_b64decode, base64.b64decode):
        try:
            decoded = decode(padded.encode("ascii"))
        except ValueError:
            continue
        assert token.encode() not in decoded
    assert base64.urlsafe_b64encode(token.encode()).decode().rstrip("=") not in cookie
    assert is_inbox_of(inbox_page(stack.base_url, cookie), name)
    # The cookie opens /ui/ and nothing else: as a key it is refused.
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        as_bearer = http.get("/v1/tools", headers={"Authorization": f"Bearer {cookie}"})
        as_cookie_only = http.get("/v1/tools", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
    assert as_bearer.status_code == 401 and as_cookie_only.status_code == 401
    # The database holds its SHA-256 and nothing from which the cookie could be read back.
    (row,) = session_rows(stack, name)
    assert row.id_hash == hashlib.sha256(cookie.encode()).hexdigest()
    assert all(cookie not in str(value) for value in row)
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        every_row = [str(tuple(r)) for r in conn.execute(sql_select(ui_sessions)).all()]
    assert not any(cookie in r for r in every_row)
    print(
        f"[{backend}] session: cookie of {len(cookie)} chars is neither the key nor base64 of it; "
        f"as Bearer -> {as_bearer.status_code}, on /v1 -> {as_cookie_only.status_code}; "
        f"stored as sha256 ({row.id_hash[:12]}...), cookie found in {len(every_row)} rows: 0"
    )


def test_sign_out_and_revocation_end_sessions_on_the_server(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    cookie = session_cookie(sign_in(stack.base_url, token))
    page = inbox_page(stack.base_url, cookie)
    assert is_inbox_of(page, name)
    # Sign-out without the page's token is refused, and the session lives on.
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        forged = http.post("/ui/logout", data={}, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
        assert forged.status_code == 403
        assert is_inbox_of(inbox_page(stack.base_url, cookie), name)
        out = http.post(
            "/ui/logout",
            data={"csrf": csrf_of(page)},
            headers={"Cookie": f"{SESSION_COOKIE}={cookie}"},
        )
    assert out.status_code == 303
    # The browser's copy of the cookie is worth nothing now: ended on the server.
    assert is_login_page(inbox_page(stack.base_url, cookie))
    assert inbox_page(stack.base_url, cookie, "/ui/pending.json").status_code == 401
    (ended,) = session_rows(stack, name)
    assert ended.ended_at is not None

    # Two live sessions of one key; revoking the key ends both at once.
    first = session_cookie(sign_in(stack.base_url, token))
    second = session_cookie(sign_in(stack.base_url, token))
    assert first != second
    assert all(is_inbox_of(inbox_page(stack.base_url, c), name) for c in (first, second))
    with runtime_of(stack.settings) as runtime:
        runtime.keys.revoke(name)
    after = [inbox_page(stack.base_url, c) for c in (first, second)]
    assert all(is_login_page(page) for page in after)
    assert all(
        inbox_page(stack.base_url, c, "/ui/pending.json").status_code == 401
        for c in (first, second)
    )
    assert all(row.ended_at is not None for row in session_rows(stack, name))
    # And the revoked key cannot start a new one.
    again = sign_in(stack.base_url, token)
    assert again.status_code == 401 and SESSION_COOKIE not in again.cookies
    print(
        f"[{backend}] session end: logout without csrf -> {forged.status_code}, with csrf -> "
        f"{out.status_code}, old cookie -> login page; revoke with 2 live sessions -> both "
        f"login page at once ({len(session_rows(stack, name))} rows ended); "
        f"sign-in with the revoked key -> {again.status_code}"
    )


def test_sign_in_is_refused_unless_posted_from_the_inbox_own_origin(stack: Stack) -> None:
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    foreign = "http://evil.example"
    attempts = {
        "no Origin, no Sec-Fetch-Site": {},
        "foreign Origin": {"Origin": foreign},
        "foreign Origin, same-origin claim": {"Origin": foreign, "Sec-Fetch-Site": "same-origin"},
        "own Origin, cross-site fetch": {"Origin": stack.base_url, "Sec-Fetch-Site": "cross-site"},
        "Origin null": {"Origin": "null"},
        "own Origin on another scheme": {"Origin": stack.base_url.replace("http:", "https:")},
    }
    answers = {}
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        for what, headers in attempts.items():
            response = http.post("/ui/login", data={"key": token}, headers=headers)
            answers[what] = response.status_code
            assert response.status_code == 403, (what, response.status_code)
            assert SESSION_COOKIE not in response.cookies
        assert session_rows(stack, name) == []
        ok = http.post("/ui/login", data={"key": token}, headers=browser_headers(stack))
    assert ok.status_code == 303 and len(session_rows(stack, name)) == 1
    print(
        f"[{backend}] sign-in origin: "
        + ", ".join(f"{what} -> {code}" for what, code in answers.items())
        + f"; own Origin -> {ok.status_code}; sessions made by refused attempts: 0"
    )


def test_repeated_failed_sign_ins_from_one_address_are_throttled(
    stack: Stack, tmp_path: Path, redis_base: str
) -> None:
    backend = backend_of(stack)
    allowed = stack.settings.ui_login_failures_per_minute
    _, token = new_key(stack, "approver")
    with throttling_api(stack, tmp_path, redis_base) as base_url:
        failures = [sign_in(base_url, f"trk_guess-{i}").status_code for i in range(allowed)]
        blocked = sign_in(base_url, token)
        blocked_bad = sign_in(base_url, "trk_guess-more")
        # A client naming another address is still the address it connects from.
        spoofed = [
            sign_in(base_url, key, {"X-Forwarded-For": f"10.1.1.{i}"}).status_code
            for i, key in enumerate((token, "trk_guess-spoofed"))
        ]
        # A refused origin is not a failed sign-in and is answered as before.
        with httpx.Client(base_url=base_url, timeout=30) as http:
            no_origin = http.post("/ui/login", data={"key": token}).status_code
        api_still = httpx.get(
            f"{base_url}/v1/tools", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ).status_code
    assert failures == [401] * allowed
    assert blocked.status_code == 429 and SESSION_COOKIE not in blocked.cookies
    assert "Too many failed sign-ins" in blocked.text
    assert blocked_bad.status_code == 429
    assert spoofed == [429, 429]
    assert no_origin == 403
    assert api_still == 200  # the API itself is not throttled
    # The stack's API counts in its own Redis: the same key signs in there.
    elsewhere = sign_in(stack.base_url, token)
    assert elsewhere.status_code == 303
    print(
        f"[{backend}] sign-in throttle: {allowed} wrong keys -> {failures}; then the right key "
        f"-> {blocked.status_code}, a wrong one -> {blocked_bad.status_code}; /v1 with the key "
        f"-> {api_still}"
    )


@contextmanager
def throttling_api(stack: Stack, tmp_path: Path, redis_base: str, **env: str) -> Iterator[str]:
    """A second API process on a Redis db of its own (API processes share the count through
    Redis), its sign-in counts forgotten before and after: the throttle it fills is nobody
    else's. Yields its base URL."""
    own_redis_url = f"{redis_base}/{TRUST_REDIS_DB}"
    forget_counts(own_redis_url, stack.settings)
    try:
        with second_api(
            stack, tmp_path / "api.log", TOOLROUTER_REDIS_URL=own_redis_url, **env
        ) as base_url:
            yield base_url
    finally:
        forget_counts(own_redis_url, stack.settings)


def forget_counts(redis_url: str, settings: Settings) -> None:
    """Drop a deployment's failed sign-in counts from one Redis db (and nothing else there)."""
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter(match=derive_namespace(settings) + ":login-failures:*"):
            client.delete(key)
    finally:
        client.close()


def test_a_real_browser_signs_in_and_its_sign_out_ends_the_server_session(
    stack: Stack,
) -> None:
    playwright_sync = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        if services.IN_CI:
            pytest.fail(f"Chromium is needed and is not at {CHROMIUM}")
        pytest.skip(f"Chromium is not at {CHROMIUM}")
    backend = backend_of(stack)
    name, token = new_key(stack, "approver")
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"],
        )
        try:
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{stack.base_url}/ui/")
            page.fill("#key", token)
            page.click("button[type=submit]")
            page.locator("button.link").wait_for()
            (cookie,) = [c for c in context.cookies() if c["name"] == SESSION_COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["value"] != token
            assert page.evaluate("document.cookie").find(SESSION_COOKIE) == -1
            page.click("button.link")
            page.locator("#key").wait_for()
            context.close()
        finally:
            browser.close()
    # The value the browser held no longer opens anything.
    assert is_login_page(inbox_page(stack.base_url, cookie["value"]))
    (row,) = session_rows(stack, name)
    assert row.ended_at is not None
    print(
        f"[{backend}] browser: Chromium's own sign-in accepted (httpOnly, SameSite=Strict, not "
        f"visible to scripts); its sign-out -> the old cookie gets the login page"
    )
