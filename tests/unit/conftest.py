"""Fixtures of the unit tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_toolrouter_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings built in these tests see only what the test passes, not the caller's shell."""
    for key in [key for key in os.environ if key.startswith("TOOLROUTER_")]:
        monkeypatch.delenv(key)
    yield
