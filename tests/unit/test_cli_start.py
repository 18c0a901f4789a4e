"""The command line starts light: `--help` and a command's own help load none of the
libraries the servers, the settings or the HTTP clients need (they are most of its start)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..support.launcher import REPO

# Top-level packages a command loads only once it runs.
HEAVY = (
    "aiohttp",
    "celery",
    "fastapi",
    "httpx",
    "pydantic",
    "pydantic_settings",
    "redis",
    "rich",
    "sqlalchemy",
    "urllib3",
)

PROGRAM = """
import json, sys
from router.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["approvals", "--help"], ["batch", "submit", "--help"], ["status", "--help"]],
)
def test_help_loads_none_of_the_heavy_libraries(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    usage, _, loaded = done.stdout.rstrip().rpartition("\n")
    assert "Usage:" in usage
    assert sorted(set(json.loads(loaded)) & set(HEAVY)) == []
