"""The inbox's flash message travels in a signed cookie, which browsers drop past 4 KB."""

from __future__ import annotations

from router.auth.sessions import SessionStore
from router.trust.keyring import KeyRing

SESSIONS = SessionStore(store=None, keyring=KeyRing(b"k" * 32), clock=lambda: 0)  # type: ignore[arg-type]


def test_a_long_message_of_wide_characters_is_cut_to_what_a_cookie_holds() -> None:
    message = "req-😀😀😀: approved\n" * 200  # its first 2,000 characters are 3,000 bytes
    value = SESSIONS.sign_flash(message, "s" * 64)
    cookie = f"tr_flash={value}; Path=/ui; Max-Age=60; HttpOnly; SameSite=strict; Secure"
    assert len(cookie) < 4096
    shown = SESSIONS.read_flash(value, "s" * 64)
    assert shown is not None and shown.endswith("…")
    assert message.startswith(shown.removesuffix("…"))


def test_a_short_message_comes_back_whole() -> None:
    message = "req-1: approved (1 of 1)\nreq-2: denied"
    assert SESSIONS.read_flash(SESSIONS.sign_flash(message, "session-1"), "session-1") == message


def test_a_message_signed_for_one_session_shows_in_no_other() -> None:
    value = SESSIONS.sign_flash("req-1: approved", "session-1")
    assert SESSIONS.read_flash(value, "session-2") is None
    assert SESSIONS.read_flash(value, "") is None
