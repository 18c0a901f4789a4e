"""Numbers on the command line out of any sensible range, and audit events that do not
exist, are usage errors (exit 2, the option named), never a traceback from the socket,
SQLite or a deque further down, nor an empty answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from router.cli.main import main
from router.settings import get_settings

HUGE = "9" * 30


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Settings of this test's own (the command line reads them once per process), with a
    log to show and a port nothing listens on, so that no API is reached."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLROUTER_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLROUTER_API_PORT", "1")
    monkeypatch.setenv("TOOLROUTER_KEY", "trk_not-a-key")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "api.log").write_text("first\nsecond\n")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["audit", "list", "--after-seq", HUGE], "--after-seq"),
        (["audit", "list", "--limit", HUGE], "--limit"),
        (["audit", "list", "--last", "9223372036854775808"], "--last"),
        (["audit", "export", "--after-seq", HUGE], "--after-seq"),
        (["audit", "export", "--after-seq", "-1"], "--after-seq"),
        (["call", "echo", "--wait", "nan"], "--wait"),
        (["call", "echo", "--wait", "inf"], "--wait"),
        (["call", "echo", "--wait", "1e300"], "--wait"),
        (["call", "echo", "--wait", "-1"], "--wait"),
        (["approvals", "approve", "req-x", "--wait", "nan"], "--wait"),
        (["approvals", "approve", "req-x", "--wait", "1e400"], "--wait"),
        (["logs", "-n", HUGE], "--lines"),
        (["audit", "list", "--event", "queue"], "--event"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error_naming_the_option(
    args: list[str], option: str
) -> None:
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Invalid value for" in result.output, result.output
    assert f"'{option}'" in result.output
    assert "Traceback" not in result.output


def test_the_largest_line_count_is_taken() -> None:
    result = CliRunner().invoke(main, ["logs", "-n", str(2**62), "api"])
    assert result.exit_code == 0, result.output
    assert result.output == "first\nsecond\n"
