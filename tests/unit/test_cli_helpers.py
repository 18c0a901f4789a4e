"""Pure pieces of the command line: where it finds a local server, and the namespace it
derives without parsing a URL, which must match the one every process derives."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.cli.common import local_url
from router.messaging.namespace import derive_namespace
from router.settings import Settings


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("::1", "http://[::1]:8000"),
        ("fe80::1", "http://[fe80::1]:8000"),
        ("tools.internal", "http://tools.internal:8000"),
    ],
)
def test_local_url_reaches_the_address_a_server_binds(host: str, expected: str) -> None:
    assert local_url(host, 8000) == expected


@pytest.mark.parametrize("folder", ["plain", "with space", "per%41cent", "ask?me", "dots/../up"])
def test_the_default_namespace_is_the_one_the_database_url_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    for key in ("TOOLROUTER_NAMESPACE", "TOOLROUTER_DATABASE_URL", "TOOLROUTER_STATE_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dots").mkdir()
    by_default = Settings(state_dir=Path(folder))
    # What `up` hands every process it starts: the resolved URL, parsed the slow way.
    as_started = Settings(state_dir=Path(folder), database_url=by_default.resolved_database_url)
    assert derive_namespace(by_default) == derive_namespace(as_started)
