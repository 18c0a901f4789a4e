"""The folders are the architecture: the core never imports the workers or the approvals."""

from __future__ import annotations

import ast
from pathlib import Path

import router

from .stack import REPO


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_router_imports_neither_workers_nor_approvals() -> None:
    offenders = []
    for path in (REPO / "router").rglob("*.py"):
        for name in imported_modules(path):
            if name.split(".")[0] in {"workers", "approvals"}:
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
    assert offenders == []


def test_public_api_is_pinned() -> None:
    assert set(router.__all__) == {
        "AsyncClient",
        "Client",
        "CallContext",
        "RetryableError",
        "AuditEvent",
        "CallResult",
        "CallStatus",
        "Role",
        "Settings",
        "Tool",
        "ToolRegistry",
        "get_settings",
        "FakeClock",
        "wall_clock_ms",
        "BadRequest",
        "ConfigError",
        "Conflict",
        "Forbidden",
        "NotAuthenticated",
        "NotFound",
        "ToolrouterError",
        "Unavailable",
    }
    for name in router.__all__:
        assert getattr(router, name) is not None


def test_no_module_reads_the_environment_but_settings() -> None:
    readers = []
    for folder in ("router", "workers", "approvals"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "os.environ" in text or "os.getenv" in text:
                readers.append(str(path.relative_to(REPO)))
    # config.py reads it only for ${VAR} interpolation in the tool config (SPEC §3);
    # up.py and processes.py hand the environment on to the processes they start.
    assert sorted(readers) == [
        "router/cli/processes.py",
        "router/cli/up.py",
        "router/config.py",
        # metrics.py sets (never reads) prometheus-client's multiprocess directory.
        "router/metrics.py",
        "router/settings.py",
    ]
