"""The modes of the files a deployment keeps, even under a careless umask.

Each test prints one line of what happened, for the closing note.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from router.cli import processes
from router.messaging.namespace import derive_namespace
from router.settings import Settings
from router.trust.keyring import key_file

from ..support.launcher import REPO, free_port, stop_group, wait_for_http
from ..support.stack import Stack, stack_env
from ..support.trust import (
    TRUST_REDIS_DB,
    eventually,
    runtime_of,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_of(settings: Settings) -> dict[str, int | None]:
    """The mode of each file a SQLite deployment keeps (None: absent)."""
    database = Path(settings.resolved_database_url.split("///", 1)[1])
    secret_key = key_file(settings, derive_namespace(settings))
    paths = {
        "state dir": settings.state_dir,
        "database": database,
        "database-wal": database.with_name(database.name + "-wal"),
        "database-shm": database.with_name(database.name + "-shm"),
        "secrets dir": secret_key.parent,
        "secret.key": secret_key,
        "flower-password": settings.state_dir / "flower-password",
    }
    return {what: mode(path) if path.exists() else None for what, path in paths.items()}


def all_present(modes: dict[str, int | None]) -> dict[str, int | None] | None:
    return modes if all(value is not None for value in modes.values()) else None


PRIVATE_MODES = {
    "state dir": 0o700,
    "database": 0o600,
    "database-wal": 0o600,
    "database-shm": 0o600,
    "secrets dir": 0o700,
    "secret.key": 0o600,
    "flower-password": 0o600,
}


def octal(modes: dict[str, int | None]) -> str:
    return ", ".join(f"{k} {oct(v) if v is not None else 'absent'}" for k, v in modes.items())


@pytest.mark.parametrize("stack", ["sqlite"], indirect=True)
def test_a_running_sqlite_deployment_keeps_its_files_owner_only(stack: Stack) -> None:
    with stack.client("agent") as http:  # a write, so the write-ahead log is in use
        assert (
            http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 30}).json()["status"]
            == "succeeded"
        )
    settings = stack.settings
    processes.flower_password(settings)
    modes = eventually(
        lambda: all_present(modes_of(settings)), "the database's -wal and -shm files"
    )
    assert modes == PRIVATE_MODES, octal(modes)
    print(f"[sqlite] file modes of the running stack: {octal(modes)}")


def test_a_careless_umask_still_leaves_every_file_owner_only(
    redis_base: str, tmp_path: Path
) -> None:
    """Started with umask 000 in a state directory someone made world-writable: the API,
    Flower, a worker and beat, each as the operator starts it."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    secrets_root = tmp_path / "secrets-root"
    env = stack_env(
        database_url=f"sqlite:///{state / 'toolrouter.db'}",
        redis_url=f"{redis_base}/{TRUST_REDIS_DB}",
        state_dir=state,
        TOOLROUTER_SECRETS_DIR=str(secrets_root),
    )
    settings = Stack(env=env, state_dir=state).settings
    port, flower_port = free_port(), free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], log: str, **extra: str) -> subprocess.Popen[bytes]:
        with (logs / log).open("wb") as handle:
            process = subprocess.Popen(
                argv,
                env={**env, **extra},
                cwd=REPO,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0,
            )
        started.append(process)
        return process

    try:
        # The operator's command: it brings the new database up to date, then runs uvicorn.
        api = start(
            [sys.executable, "-m", "router.cli.main", "api", "--port", str(port)], "api.log"
        )
        wait_for_http(f"http://127.0.0.1:{port}/healthz", api, "see api.log", timeout=90)
        flower = start(
            [sys.executable, "-m", "router.cli.main", "flower"],
            "flower.log",
            TOOLROUTER_FLOWER_PORT=str(flower_port),
            TOOLROUTER_FLOWER_HOST="127.0.0.1",
        )
        eventually(
            lambda: (state / "flower-password").exists() or flower.poll() is not None,
            "flower's password file",
        )
        # A write through the API, so its connections keep the write-ahead log open.
        with runtime_of(settings) as runtime:
            token = runtime.keys.create("careless", ["agent"])
        # A worker and beat: Celery and prometheus-client write files of their own there.
        start([sys.executable, "-m", "router.cli.main", "worker", "--risk", "low"], "worker.log")
        start([sys.executable, "-m", "router.cli.main", "beat"], "beat.log")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            answer = http.post(
                "/v1/calls",
                json={"tool": "echo", "args": {}, "wait_s": 60},
                headers={"Authorization": f"Bearer {token}"},
            ).json()
        assert answer["status"] == "succeeded", answer
        modes = eventually(lambda: all_present(modes_of(settings)), "every file of the deployment")
        eventually(
            lambda: (
                list(state.glob("celerybeat-schedule*")) and list((state / "metrics").glob("*.db"))
            ),
            "beat's schedule and the processes' metric samples",
        )
    finally:
        for process in started:
            stop_group(process)
    assert modes == PRIVATE_MODES, octal(modes)
    loose = sorted(
        f"{p.relative_to(state)} {oct(mode(p))}"
        for p in state.rglob("*")
        if mode(p) & 0o077 and not p.is_symlink()
    )
    print(
        f"[sqlite] umask 000, state dir made 0777 beforehand: {octal(modes)}; secrets root "
        f"{oct(mode(secrets_root))}; group/other-accessible in the state dir: {loose}"
    )
    assert loose == []
