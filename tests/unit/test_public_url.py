"""Inbox links in notifications name an address approvers can open: ``TOOLROUTER_PUBLIC_URL``,
else the API's bind address, with this host's name for one that binds every interface;
and the process that makes the links warns at start when they are such a guess."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from router.cli import processes
from router.cli.main import main
from router.cli.preflight import public_url_warning
from router.settings import Settings, get_settings

CONFIG = """
notifications:
  channels:
    hook: {type: webhook, url: "https://hooks.example.test/toolrouter", secret: "${HOOK_SECRET}"}
  roles:
    approver: [hook]
tools:
  - {name: wire, handler: "tests.fixture_tools:echo", risk: high}
"""


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_links_name_this_machine_when_the_api_binds_every_interface(
    host: str, no_toolrouter_env: None
) -> None:
    settings = Settings(api_host=host, api_port=8000)
    assert settings.resolved_public_url == f"http://{socket.gethostname()}:8000"
    assert settings.public_url_guessed


@pytest.mark.parametrize(
    ("host", "url"),
    [("127.0.0.1", "http://127.0.0.1:8000"), ("::1", "http://[::1]:8000")],
)
def test_links_name_a_bind_address_of_one_interface_as_it_is(
    host: str, url: str, no_toolrouter_env: None
) -> None:
    settings = Settings(api_host=host, api_port=8000)
    assert settings.resolved_public_url == url
    assert not settings.public_url_guessed


def test_a_public_url_wins_over_any_bind_address(no_toolrouter_env: None) -> None:
    settings = Settings(api_host="0.0.0.0", public_url="https://inbox.example.test/")
    assert settings.resolved_public_url == "https://inbox.example.test"
    assert not settings.public_url_guessed


def test_the_warning_is_for_a_wildcard_bind_with_notifications_and_no_public_url(
    no_toolrouter_env: None,
) -> None:
    unset = Settings(api_host="0.0.0.0")
    warning = public_url_warning(unset, True, on_its_own=False)
    assert warning is not None
    assert "TOOLROUTER_PUBLIC_URL" in warning
    assert f"http://{socket.gethostname()}:8000/ui/" in warning
    assert public_url_warning(Settings(api_host="::"), True, on_its_own=False) is not None
    assert public_url_warning(unset, False, on_its_own=False) is None
    # `up` on one interface: links to it are right for whoever uses this machine.
    assert public_url_warning(Settings(), True, on_its_own=False) is None
    given = Settings(api_host="0.0.0.0", public_url="https://inbox.example.test")
    assert public_url_warning(given, True, on_its_own=False) is None


def test_a_notification_worker_of_its_own_warns_of_any_link_it_must_guess(
    no_toolrouter_env: None,
) -> None:
    """Run apart (compose, several machines), its links name its own host or address."""
    warning = public_url_warning(Settings(), True, on_its_own=True)
    assert warning is not None and "http://127.0.0.1:8000/ui/" in warning
    given = Settings(public_url="https://inbox.example.test")
    assert public_url_warning(given, True, on_its_own=True) is None
    assert public_url_warning(Settings(), False, on_its_own=True) is None


@pytest.fixture
def worker_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_toolrouter_env: None
) -> Iterator[list[list[str]]]:
    """`toolrouter notification-worker`'s settings of this test's own, and the command line
    it would run (recorded, not run)."""
    config = tmp_path / "toolrouter.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLROUTER_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLROUTER_CONFIG", str(config))
    monkeypatch.setenv("HOOK_SECRET", "s" * 32)
    started: list[list[str]] = []
    monkeypatch.setattr(processes, "exec_argv", started.append)
    get_settings.cache_clear()
    yield started
    get_settings.cache_clear()


def test_the_notification_worker_warns_that_its_links_are_a_guess(
    worker_env: list[list[str]],
) -> None:
    result = CliRunner().invoke(main, ["notification-worker"])
    assert result.exit_code == 0, result.output
    assert len(worker_env) == 1
    assert result.stderr.count("set it to the address approvers open") == 1, result.stderr
    assert "links in notifications read http://127.0.0.1:8000/ui/" in result.stderr


def test_the_notification_worker_with_a_public_url_starts_without_a_warning(
    worker_env: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLROUTER_PUBLIC_URL", "https://inbox.example.test")
    result = CliRunner().invoke(main, ["notification-worker"])
    assert result.exit_code == 0, result.output
    assert len(worker_env) == 1
    assert result.stderr == ""
