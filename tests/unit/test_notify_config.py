"""The ``notifications`` config: what it accepts, and every mistake refused at load time
naming the file and the field, never a secret's value."""

from __future__ import annotations

import pytest

from router.errors import ConfigError
from router.notify import content
from router.notify.content import summarize
from router.notify.signing import header_value, verify
from router.tools.config import parse_config
from router.trust.redaction import Redactor

ENV = {"HOOK_SECRET": "s3cr3t-s3cr3t-s3cr3t", "SLACK_URL": "https://hooks.test/T/B/XYZ"}
GOOD = """
notifications:
  channels:
    ops-hook: {type: webhook, url: "https://ops.test/hook", secret: "${HOOK_SECRET}"}
    chat: {type: slack, url: "${SLACK_URL}"}
    finance-mail: {type: email, host: smtp.test, from_addr: a@test, to: [b@test]}
  roles:
    approver: [ops-hook, chat]
    finance: [finance-mail]
tools:
  - {name: wire, handler: "m:f", risk: high, approvers: [finance, approver], notify: [chat]}
"""


def test_channels_come_from_the_tool_then_its_roles_each_once() -> None:
    config = parse_config(GOOD, file="t.yaml", env=ENV)
    (wire,) = config.tools
    found = config.notifications.channels_for(wire.approvers, wire.notify)
    assert found == ["chat", "finance-mail", "ops-hook"]
    assert config.notifications.channels["ops-hook"].secret == ENV["HOOK_SECRET"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (('secret: "${HOOK_SECRET}"', "secret: literal-secret-value"), "ops-hook.secret: must be"),
        (('url: "${SLACK_URL}"', 'url: "https://hooks.test/T/B/XYZ"'), "chat.url: must be"),
        (("approver: [ops-hook, chat]", "approver: [ops-hook, pager]"), "unknown channel pager"),
        (("notify: [chat]", "notify: [pager]"), "notify: unknown channel pager"),
        (("type: slack", "type: pigeon"), "notifications.channels.chat"),
        (("to: [b@test]", "to: []"), "finance-mail.to"),
        (("from_addr: a@test", "from_addr: a@test, colour: red"), "colour: unknown key"),
        (("  roles:", "  role:"), "notifications.role: unknown key"),
        (('url: "https://ops.test/hook"', 'url: "ftp://ops.test"'), "ops-hook.url"),
        (('url: "https://ops.test/hook"', 'url: "https://ops.test:99999/hook"'), "65535"),
        (('url: "https://ops.test/hook"', 'url: "https://ops.test:0/hook"'), "65535"),
        (('url: "https://ops.test/hook"', 'url: "https://:8080/hook"'), "names no host"),
        (('url: "https://ops.test/hook"', 'url: "http://\u2603.\u2603/x"'), "not a valid host"),
        (('url: "https://ops.test/hook"', 'url: "http://xn--/x"'), "not a valid host name"),
        (('url: "https://ops.test/hook"', 'url: "http://a b/x"'), "a space or a control"),
        (("host: smtp.test", 'host: ""'), "finance-mail.host"),
        (("to: [b@test]", 'to: ["b@test\\nBcc: evil@test"]'), "not one email address"),
        (("from_addr: a@test", 'from_addr: "a, b@test"'), 'not one email address: "a, b@test"'),
        (
            ('secret: "${HOOK_SECRET}"', 'secret: "${UNSET_SECRET}"'),
            "notifications.channels.ops-hook.secret: environment variable UNSET_SECRET is not set",
        ),
    ],
)
def test_a_bad_notifications_table_is_refused_naming_file_and_field(
    change: tuple[str, str], complaint: str
) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(ConfigError) as caught:
        parse_config(text, file="t.yaml", env=ENV)
    assert "t.yaml" in str(caught.value) and complaint in str(caught.value)
    assert ENV["HOOK_SECRET"] not in str(caught.value)


def test_a_slack_url_with_no_usable_port_is_refused_without_its_value() -> None:
    url = "https://hooks.test:99999/T/B/XYZ"
    with pytest.raises(ConfigError) as caught:
        parse_config(GOOD, file="t.yaml", env={**ENV, "SLACK_URL": url})
    assert "chat.url" in str(caught.value) and "XYZ" not in str(caught.value)


def test_a_slack_url_ending_in_a_line_break_is_refused_without_its_value() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(GOOD, file="t.yaml", env={**ENV, "SLACK_URL": ENV["SLACK_URL"] + "\n"})
    assert "chat.url: " in str(caught.value) and "XYZ" not in str(caught.value)


def test_a_short_webhook_secret_is_refused_without_its_value() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(GOOD, file="t.yaml", env={**ENV, "HOOK_SECRET": "short-secret"})
    assert "ops-hook.secret" in str(caught.value) and "short-secret" not in str(caught.value)


def test_a_signature_verifies_only_with_its_secret_body_and_a_recent_time() -> None:
    body = b'{"event":"pending"}'
    header = header_value("k" * 20, 1_000, body)
    assert header.startswith("t=1000,v1=")
    assert verify("k" * 20, header, body, now=1_010)
    assert not verify("x" * 20, header, body, now=1_010)
    assert not verify("k" * 20, header, body + b" ", now=1_010)
    assert not verify("k" * 20, header, body, now=2_000)
    assert not verify("k" * 20, "garbage", body, now=1_010)


def test_an_argument_summary_masks_secrets_and_stays_short() -> None:
    redactor = Redactor({"TOKEN": "tok-from-the-environment"})
    args = {
        "to": "bob",
        "api_key": "k-123",
        "note": "uses tok-from-the-environment",
        "x": "y" * 999,
    }
    text = summarize(args, redactor)
    assert '"api_key": "***"' in text and "k-123" not in text
    assert "${TOKEN}" in text and "tok-from-the-environment" not in text
    assert len(text) <= 300


def test_a_secret_across_a_values_cut_leaves_none_of_it_in_the_summary() -> None:
    secret = "tok-from-the-environment"
    redactor = Redactor({"TOKEN": secret})
    # The value is cut at 60 characters: here, half way into the secret.
    note = "a" * (59 - len(secret) // 2) + secret
    text = summarize({"note": note}, redactor)
    assert secret[: len(secret) // 2] not in text, text
    assert "${TOKEN}" in text


def test_secret_looking_keys_and_values_are_masked_whatever_they_are_called() -> None:
    key = "trk_" + "A1b2_C3d4-" * 4
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    args = {
        "pwd": "pw3",
        "session_cookie": "ck",
        "user_pin": "1234",
        "otp": "123456",
        "cvv": "123",
        "jwt": "x",
        "sig": "s",
        "note": f"use {key} please",
        "header": f"Bearer {jwt}",
        "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        "shipping": "post",
        "mapping": "a->b",
    }
    text = summarize(args, Redactor({}))
    for name in ["pwd", "session_cookie", "user_pin", "otp", "cvv", "jwt", "sig"]:
        assert f'"{name}": "***"' in text, text
    for secret in [key, jwt, "MIIEow", "pw3", "1234"]:
        assert secret not in text, text
    assert '"note": "use *** please"' in text and '"header": "***"' in text
    assert '"shipping": "post"' in text and '"mapping": "a->b"' in text


def test_secret_looking_values_are_looked_for_only_where_a_summary_can_show_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The patterns cost the square of a run's length (``eyJ`` repeated, say): a value of
    the arguments' full size is scanned no further than the part a summary may show."""
    scanned: list[int] = []
    pattern = content.SECRET_VALUE_RE

    class Recording:
        def sub(self, replacement: str, text: str) -> str:
            scanned.append(len(text))
            return pattern.sub(replacement, text)

    monkeypatch.setattr(content, "SECRET_VALUE_RE", Recording())
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
    text = summarize({"a": jwt + "eyJ" * 90_000, "b": "short"}, Redactor({}))
    assert max(scanned) <= content.SCANNED_CHARS
    assert jwt not in text and '"a": "***' in text and '"b": "short"' in text


@pytest.mark.parametrize(
    "address", ["Finance <fin@x.test>", '"Fin Ops" <fin@x.test>', "root", "a@test"]
)
def test_an_address_a_header_takes_as_one_mailbox_is_taken(address: str) -> None:
    text = GOOD.replace("from_addr: a@test", f"from_addr: '{address}'")
    config = parse_config(text, file="t.yaml", env=ENV)
    assert config.notifications.channels["finance-mail"].from_addr == address  # type: ignore[union-attr]
