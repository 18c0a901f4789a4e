"""The Procfile, docker-compose.yml and the argv builders describe the same processes.

SPEC §13: `toolrouter up`, the single-process commands, the Procfile and the compose file
run the same set. Docker cannot run here, so the compose file and the Dockerfile are
checked by reading them; `toolrouter up` itself is run in tests/stack/test_up.py.
"""

from __future__ import annotations

import inspect
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from router.cli import processes
from router.cli.main import main as toolrouter_cli
from router.constants import (
    ALL_QUEUES,
    APPROVALS_QUEUE,
    MAINTENANCE_QUEUE,
    NOTIFICATIONS_QUEUE,
    RISK_LEVELS,
    TOOL_QUEUES,
    queue_for,
)
from router.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PROCFILE = REPO / "Procfile"
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"

# Services of the compose file that are not toolrouter processes.
INFRASTRUCTURE = {"redis", "postgres", "migrate"}
EXPECTED_PROCESSES = {
    "api",
    *(f"worker-{risk}" for risk in RISK_LEVELS),
    "approvals",
    "notifications",
    "beat",
    "flower",
}
DATABASE_URL = "postgresql://toolrouter:toolrouter@postgres:5432/toolrouter"
REDIS_URL = "redis://redis:6379/0"
_COMPOSE_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def procfile_commands() -> dict[str, list[str]]:
    """``name -> argv`` of every process in the Procfile, in file order."""
    commands: dict[str, list[str]] = {}
    for raw in PROCFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, command = line.partition(":")
        assert sep, f"Procfile line without 'name: command': {raw!r}"
        name = name.strip()
        assert name not in commands, f"process {name!r} appears twice in the Procfile"
        commands[name] = shlex.split(command)
    return commands


def compose_file() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def compose_services() -> dict[str, dict[str, Any]]:
    services = compose_file()["services"]
    assert isinstance(services, dict)
    return services


def command_argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if isinstance(command, str):
        return shlex.split(command)
    assert isinstance(command, list), f"service without a command: {service}"
    return [str(part) for part in command]


def service_env(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment, with ``${VAR:-default}`` resolved to its default."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {
        str(key): _COMPOSE_VAR.sub(lambda m: m.group(2) or "", str(value))
        for key, value in env.items()
    }


def container_ports(service: dict[str, Any]) -> set[int]:
    """Container-side ports a service publishes (short syntax ``[host_ip:]host:container``)."""
    ports = set()
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).rsplit(":", 1)[-1].split("/")[0]))
    return ports


def option(argv: list[str], flag: str) -> str:
    """The value of ``flag`` in ``argv``, as ``flag value`` or ``flag=value``."""
    for index, part in enumerate(argv):
        if part == flag:
            return argv[index + 1]
        if part.startswith(flag + "="):
            return part.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {argv}")


# -- the toolrouter command behind each process ---------------------------------------------

Builder = Callable[[Settings, dict[str, Any]], list[str]]

# The argv builder each `toolrouter X` command execs, called with that command's options.
BUILDERS: dict[str, tuple[Callable[..., list[str]], Builder]] = {
    "api": (
        processes.api_argv,
        lambda s, p: processes.api_argv(s, host=p["host"], port=p["port"]),
    ),
    "worker": (
        processes.worker_argv,
        lambda s, p: processes.worker_argv(s, p["risk"], p["concurrency"]),
    ),
    "approval-worker": (processes.approvals_argv, lambda s, p: processes.approvals_argv(s)),
    "notification-worker": (
        processes.notifications_argv,
        lambda s, p: processes.notifications_argv(s),
    ),
    "beat": (processes.beat_argv, lambda s, p: processes.beat_argv(s)),
    "flower": (processes.flower_argv, lambda s, p: processes.flower_argv(s)),
}


def resolve(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse ``toolrouter X …`` with the real click command: its name and parsed options."""
    assert argv[0] == "toolrouter", f"not a toolrouter command: {argv}"
    with click.Context(toolrouter_cli, info_name="toolrouter") as ctx:
        name, command, rest = toolrouter_cli.resolve_command(ctx, argv[1:])
        assert name is not None and command is not None, f"unknown command: {argv}"
        with command.make_context(name, rest, parent=ctx) as sub:
            return name, dict(sub.params)


def built_argv(argv: list[str], settings: Settings) -> list[str]:
    name, params = resolve(argv)
    assert name in BUILDERS, f"`toolrouter {name}` is not a process command"
    return BUILDERS[name][1](settings, params)


def celery_part(argv: list[str]) -> list[str]:
    """What follows ``python -m celery -A workers.app``; fails if argv is not that."""
    prefix = [sys.executable, "-m", "celery", "-A", processes.CELERY_APP]
    assert argv[: len(prefix)] == prefix, argv
    return argv[len(prefix) :]


# -- Procfile -----------------------------------------------------------------------------------


def test_procfile_names_every_process_of_the_spec() -> None:
    assert set(procfile_commands()) == EXPECTED_PROCESSES


def test_every_procfile_command_is_a_toolrouter_process_command() -> None:
    for name, argv in procfile_commands().items():
        command, _params = resolve(argv)
        assert command in BUILDERS, f"{name}: `{shlex.join(argv)}` runs no process"


def test_each_process_command_execs_its_argv_builder() -> None:
    """The click command behind each Procfile line hands its builder's argv to exec."""
    for name, argv in procfile_commands().items():
        command_name, _ = resolve(argv)
        builder = BUILDERS[command_name][0]
        command = toolrouter_cli.commands[command_name]
        assert command.callback is not None
        source = inspect.getsource(command.callback)
        assert f"processes.{builder.__name__}(" in source, (name, command_name)
        assert "processes.exec_argv(" in source, (name, command_name)


def test_worker_processes_serve_exactly_the_tool_queues(no_toolrouter_env: None) -> None:
    settings = Settings()
    served: dict[str, str] = {}
    for name, argv in procfile_commands().items():
        command, params = resolve(argv)
        if command != "worker":
            continue
        assert name == f"worker-{params['risk']}"
        worker = celery_part(built_argv(argv, settings))
        assert worker[0] == "worker"
        queues = option(worker, "-Q").split(",")
        assert queues == [queue_for(params["risk"])], (name, queues)
        assert queues[0] not in served, f"{queues[0]} served by {served.get(queues[0])} too"
        served[queues[0]] = name
    assert set(served) == set(TOOL_QUEUES)


def test_approvals_process_serves_decisions_and_maintenance_only(no_toolrouter_env: None) -> None:
    # Notifications there would let retries falling due together run ahead of a decision
    # (tests/stack/test_decisions_beside_notifications.py).
    worker = celery_part(built_argv(procfile_commands()["approvals"], Settings()))
    assert worker[0] == "worker"
    assert set(option(worker, "-Q").split(",")) == {APPROVALS_QUEUE, MAINTENANCE_QUEUE}


def test_notifications_process_serves_notifications_only(no_toolrouter_env: None) -> None:
    settings = Settings(notify_concurrency=7)
    worker = celery_part(built_argv(procfile_commands()["notifications"], settings))
    assert worker[0] == "worker"
    assert option(worker, "-Q") == NOTIFICATIONS_QUEUE
    assert option(worker, "-n") == "notifications@%h"
    assert option(worker, "-P") == "prefork"
    assert option(worker, "-c") == "7"


def test_approvals_process_takes_a_message_only_when_a_pool_process_is_free(
    no_toolrouter_env: None,
) -> None:
    # Else a decision waits behind sweeps reserved before it.
    worker = celery_part(built_argv(procfile_commands()["approvals"], Settings()))
    assert "--disable-prefetch" in worker


@pytest.mark.parametrize(
    ("command_name", "builder"),
    [
        ("approval-worker", processes.approvals_argv),
        ("notification-worker", processes.notifications_argv),
    ],
)
def test_worker_help_names_every_queue_it_serves(
    no_toolrouter_env: None, command_name: str, builder: Callable[[Settings], list[str]]
) -> None:
    # The CLI reference is generated from this help: it must name what the worker consumes.
    command = toolrouter_cli.commands[command_name]
    assert isinstance(command, click.Command) and command.help
    worker = celery_part(builder(Settings()))
    for queue in option(worker, "-Q").split(","):
        assert queue in command.help, (queue, command.help)


def test_every_queue_has_exactly_one_kind_of_consumer(no_toolrouter_env: None) -> None:
    settings = Settings()
    consumers: dict[str, list[str]] = {}
    for name, argv in procfile_commands().items():
        built = built_argv(argv, settings)
        if built[:3] == [sys.executable, "-m", "celery"] and celery_part(built)[0] == "worker":
            for queue in option(built, "-Q").split(","):
                consumers.setdefault(queue, []).append(name)
    assert {queue: len(names) for queue, names in consumers.items()} == dict.fromkeys(
        ALL_QUEUES, 1
    ), consumers


def test_api_beat_and_flower_commands_build_their_servers(
    no_toolrouter_env: None, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path, api_port=8123, flower_port=5678)
    commands = procfile_commands()
    api = built_argv(commands["api"], settings)
    assert api[:3] == [sys.executable, "-m", "uvicorn"]
    assert "router.api.app:app_from_env" in api
    assert option(api, "--port") == "8123"
    assert option(api, "--host") == settings.api_host
    beat = celery_part(built_argv(commands["beat"], settings))
    assert beat[0] == "beat"
    assert Path(option(beat, "-s")).parent == tmp_path.resolve()
    flower = celery_part(built_argv(commands["flower"], settings))
    assert flower[0] == "flower"
    assert option(flower, "--port") == "5678"
