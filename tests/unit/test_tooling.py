"""Lint, format and type checks run with the tests, so CI keeps them true."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..support.launcher import REPO

CHECKS = {
    "ruff-lint": [
        sys.executable,
        "-m",
        "ruff",
        "check",
        "router",
        "workers",
        "approvals",
        "tests",
        "bench",
    ],
    "ruff-format": [
        sys.executable,
        "-m",
        "ruff",
        "format",
        "--check",
        "router",
        "workers",
        "approvals",
        "tests",
        "bench",
    ],
    "mypy": [sys.executable, "-m", "mypy"],
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_code_passes(name: str) -> None:
    result = subprocess.run(CHECKS[name], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
