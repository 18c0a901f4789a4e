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
import tomllib
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


# -- docker-compose.yml ---------------------------------------------------------------------


def test_compose_runs_the_procfile_processes_with_the_same_commands() -> None:
    services = compose_services()
    app = {name: service for name, service in services.items() if name not in INFRASTRUCTURE}
    commands = procfile_commands()
    assert set(app) == set(commands)
    for name, argv in commands.items():
        assert command_argv(app[name]) == argv, name


def test_compose_redis_keeps_every_message() -> None:
    redis = compose_services()["redis"]
    assert str(redis["image"]).split(":")[0] == "redis"
    assert str(redis["image"]).split(":")[1].split(".")[0] == "7"
    argv = command_argv(redis)
    assert argv[0] == "redis-server"
    assert option(argv, "--appendonly") == "yes"
    assert option(argv, "--maxmemory-policy") == "noeviction"
    # The append-only file is worth something only on a volume that outlives the container.
    assert any(str(volume).split(":")[1] == "/data" for volume in redis.get("volumes", []))


def test_compose_postgres_is_healthchecked_and_matches_the_database_url() -> None:
    postgres = compose_services()["postgres"]
    assert str(postgres["image"]) == "postgres:16"
    assert postgres["healthcheck"]["test"]
    env = service_env(postgres)
    user, password, db = env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]
    url_of_postgres_service = f"postgresql://{user}:{password}@postgres:5432/{db}"
    assert url_of_postgres_service == DATABASE_URL


def test_compose_migrate_upgrades_the_schema_once_postgres_is_healthy() -> None:
    migrate = compose_services()["migrate"]
    assert command_argv(migrate) == ["toolrouter", "db", "upgrade"]
    assert resolve(command_argv(migrate)) == ("db", {})
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert service_env(migrate)["TOOLROUTER_DATABASE_URL"] == DATABASE_URL
    # A restart policy would run it again after its successful exit, forever.
    assert str(migrate.get("restart", "no")) == "no"


def test_compose_processes_wait_for_the_migration_and_share_settings() -> None:
    services = compose_services()
    for name in procfile_commands():
        service = services[name]
        depends = service["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["redis"]["condition"] == "service_healthy", name
        env = service_env(service)
        assert env["TOOLROUTER_DATABASE_URL"] == DATABASE_URL, name
        assert env["TOOLROUTER_REDIS_URL"] == REDIS_URL, name


def test_compose_builds_one_image_that_every_toolrouter_service_runs() -> None:
    services = compose_services()
    toolrouter_services = {name: services[name] for name in {*procfile_commands(), "migrate"}}
    images = {service.get("image") for service in toolrouter_services.values()}
    assert len(images) == 1 and None not in images, images
    builders = [name for name, service in services.items() if "build" in service]
    assert builders == ["migrate"], "the image must be built by exactly one service"
    build = services["migrate"]["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    assert (REPO / context).resolve() == REPO
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (REPO / context / dockerfile).resolve() == DOCKERFILE


def test_dockerfile_installs_every_package_of_the_project() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if not line.strip().startswith("#")]
    assert any(re.fullmatch(r"RUN (python -m )?pip install \.", line) for line in lines), text
    copied = " ".join(line for line in lines if line.startswith("COPY ") and "--from" not in line)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert re.search(rf"(^|\s){re.escape(package)}(\s|/)", copied), f"{package} not copied"
    assert "pyproject.toml" in copied
    readme = pyproject["project"].get("readme")
    if readme:
        assert readme in copied, "pyproject's readme must be in the build context"


def test_compose_api_listens_on_the_published_port(no_toolrouter_env: None) -> None:
    api = compose_services()["api"]
    env = service_env(api)
    assert env["TOOLROUTER_API_HOST"] == "0.0.0.0"
    settings = Settings(**{k.removeprefix("TOOLROUTER_").lower(): v for k, v in env.items()})
    argv = built_argv(command_argv(api), settings)
    assert option(argv, "--host") == "0.0.0.0"
    assert container_ports(api) == {8000}
    assert int(option(argv, "--port")) == 8000


def test_compose_flower_listens_on_the_published_port_with_basic_auth(
    no_toolrouter_env: None,
) -> None:
    """Flower inside a container must bind beyond loopback, or its published port is dead."""
    flower = compose_services()["flower"]
    env = service_env(flower)
    settings = Settings(**{k.removeprefix("TOOLROUTER_").lower(): v for k, v in env.items()})
    argv = built_argv(command_argv(flower), settings)
    assert container_ports(flower) == {5555}
    assert int(option(argv, "--port")) == 5555
    # Basic auth travels in Flower's environment, not on its argv where `ps` shows it.
    assert "--basic-auth" not in " ".join(argv)
    auth = processes.flower_env(settings)["FLOWER_BASIC_AUTH"]
    assert auth == f"{settings.flower_user}:{settings.flower_password}"
    address = option(argv, "--address")
    assert address not in {"127.0.0.1", "localhost"}, (
        f"flower_argv binds --address={address} whatever the settings say: inside the "
        "container nothing reaches the published port 5555"
    )
