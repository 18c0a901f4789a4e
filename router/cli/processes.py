"""The command line of every process, defined once.

``toolrouter up``, the single-process commands, the ``Procfile`` and
``docker-compose.yml`` all describe these same processes; a test keeps them in step.
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import TYPE_CHECKING, NoReturn

from ..constants import APPROVALS_QUEUE, MAINTENANCE_QUEUE, NOTIFICATIONS_QUEUE, queue_for
from ..files import private_dir

if TYPE_CHECKING:
    from ..settings import Settings

CELERY_APP = "workers.app"
# uvicorn's httptools protocol, answering what it cannot parse in the API's JSON.
HTTP_PROTOCOL = "router.api.http_protocol:JsonErrorsHttpToolsProtocol"


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, *args]


def api_argv(settings: Settings, *, host: str | None = None, port: int | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "router.api.app:app_from_env",
        "--host",
        host or settings.api_host,
        "--port",
        str(port or settings.api_port),
        "--http",
        HTTP_PROTOCOL,
        "--no-access-log",
        "--timeout-graceful-shutdown",
        "5",
        *(
            ["--proxy-headers", "--forwarded-allow-ips", settings.trusted_proxies]
            if settings.trusted_proxies
            else ["--no-proxy-headers"]
        ),
        *(["--workers", str(count)] if (count := settings.resolved_api_processes) > 1 else []),
    ]


def worker_argv(settings: Settings, risk: str, concurrency: int | None = None) -> list[str]:
    return celery(
        "worker",
        "-Q",
        queue_for(risk),
        "-n",
        f"{risk}@%h",
        "-P",
        "prefork",
        "-c",
        str(concurrency or settings.worker_concurrency),
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    )


def approvals_argv(settings: Settings) -> list[str]:
    return celery(
        "worker",
        "-Q",
        f"{APPROVALS_QUEUE},{MAINTENANCE_QUEUE}",
        "-n",
        "approvals@%h",
        "-P",
        "prefork",
        # Two: a decision goes on in one pool process while a sweep runs in the other.
        "-c",
        "2",
        # A message is taken only when a pool process is free, so a decision never waits
        # behind sweeps taken before it.
        "--disable-prefetch",
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    )


def notifications_argv(settings: Settings) -> list[str]:
    """The notification worker: off the approval worker, since retries falling due together
    would run ahead of a decision there."""
    return celery(
        "worker",
        "-Q",
        NOTIFICATIONS_QUEUE,
        "-n",
        "notifications@%h",
        "-P",
        "prefork",
        "-c",
        str(settings.notify_concurrency),
        "-l",
        "INFO",
        "--without-mingle",
        "--without-gossip",
    )


def beat_argv(settings: Settings) -> list[str]:
    schedule = (settings.state_dir / "celerybeat-schedule").resolve()
    return celery("beat", "-s", str(schedule), "-l", "INFO")


def flower_argv(settings: Settings) -> list[str]:
    return celery("flower", f"--port={settings.flower_port}", f"--address={settings.flower_host}")


def flower_password(settings: Settings) -> str:
    """``TOOLROUTER_FLOWER_PASSWORD``, else one generated once and kept in the state dir."""
    if settings.flower_password:
        return settings.flower_password
    private_dir(settings.state_dir)
    path = settings.state_dir / "flower-password"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(12))
    return path.read_text(encoding="utf-8").strip()


def flower_env(settings: Settings) -> dict[str, str]:
    """Basic auth for Flower, passed in its environment rather than on a visible argv."""
    return {"FLOWER_BASIC_AUTH": f"{settings.flower_user}:{flower_password(settings)}"}


def exec_argv(argv: list[str], env: dict[str, str] | None = None) -> NoReturn:
    """Replace this process with ``argv``, so signals reach the real server directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    if env:
        os.execve(argv[0], argv, {**os.environ, **env})
    os.execv(argv[0], argv)
