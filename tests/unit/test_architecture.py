"""The folders are the architecture: each layer imports only the layers below it, no module
takes part in an import cycle, and the core never imports the workers or the approvals."""

from __future__ import annotations

import ast
from pathlib import Path

import router

from ..support.launcher import REPO


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


# Lowest first. A module may import its own layer and the layers below it, never above.
# Each entry names a package (or, for the core, the modules at the top of ``router``).
LAYERS: list[set[str]] = [
    {"router.core"},
    {"router.trust", "router.db", "router.client"},
    {"router.audit", "router.auth", "router.tools"},
    {"router.messaging", "router.approval", "router.notify"},
    {"router.dispatch"},
    {"router.runtime"},
    {"router.ui", "router.mcp"},
    {"router.api"},
    {"router.cli", "workers", "approvals"},
    {"bench"},
]
CORE = {
    "settings",
    "constants",
    "errors",
    "status",
    "results",
    "ids",
    "clock",
    "canonical",
    "json_input",
    "context",
    "files",
    "threads",
    "names",
    "chunking",
    "metrics",
    "guards",
    "lazy",
    "heap",
}


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def absolute_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, ``from pkg import mod``
    counted as importing ``pkg.mod``. ``TYPE_CHECKING`` imports count too."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] == "router" and len(parts) > 1 and parts[1] not in CORE:
        unit = f"router.{parts[1]}"
    elif parts[0] == "router":
        unit = "router.core"
    else:
        unit = parts[0]
    for index, layer in enumerate(LAYERS):
        if unit in layer:
            return index
    return None


def project_files() -> list[Path]:
    return [
        path
        for folder in ("router", "workers", "approvals", "bench")
        for path in (REPO / folder).rglob("*.py")
        if "migrations" not in path.parts
    ]


def test_every_module_imports_only_its_layer_and_the_layers_below() -> None:
    known = {module_name(path) for path in project_files()}
    upward = []
    for path in project_files():
        own = layer_of(module_name(path))
        assert own is not None, f"{module_name(path)} is in no layer"
        for target in absolute_imports(path):
            if target not in known:
                continue
            theirs = layer_of(target)
            if module_name(path) == "router" and target.startswith("router"):
                continue  # the package's public face re-exports from every layer
            if theirs is not None and theirs > own:
                upward.append(f"{module_name(path)} -> {target}")
    assert upward == []


def test_no_module_is_in_an_import_cycle() -> None:
    # Modules only: a package's face hands names on, and ``from . import x`` names it.
    known = {module_name(path): path for path in project_files() if path.name != "__init__.py"}
    graph = {
        name: {t for t in absolute_imports(path) if t in known and t != name}
        for name, path in known.items()
    }
    graph = {name: {t for t in targets if t in graph} for name, targets in graph.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


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
        # metrics.py sets (never reads) prometheus-client's multiprocess directory.
        "router/metrics.py",
        "router/settings.py",
        "router/tools/config.py",
    ]
