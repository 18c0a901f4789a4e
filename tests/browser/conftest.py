"""A real headless Chromium (Debian's), driven by Playwright, for the browser tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..support.chromium import CHROMIUM
from ..support.services import IN_CI

try:
    from playwright import sync_api as playwright_sync
except ImportError:
    # Installed with the test extras: CI always has it, so there a missing one fails.
    if IN_CI:
        raise
    pytest.skip("Playwright is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        message = f"Chromium is needed for the inbox tests and is not at {CHROMIUM}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()
