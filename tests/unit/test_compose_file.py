"""docker-compose.yml and the Dockerfile run the Procfile's processes as SPEC §13 asks, and
keep what must outlive a container on volumes. Docker cannot run here, so both files are
checked by reading them (helpers shared with tests/unit/test_process_definitions.py).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from router.cli import processes
from router.runtime import Runtime
from router.settings import Settings

from .test_process_definitions import (
    DATABASE_URL,
    DOCKERFILE,
    INFRASTRUCTURE,
    REDIS_URL,
    REPO,
    built_argv,
    command_argv,
    compose_file,
    compose_services,
    container_ports,
    option,
    procfile_commands,
    resolve,
    service_env,
)


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


def test_every_toolrouter_service_keeps_the_audit_archive_on_one_volume(
    no_toolrouter_env: None,
) -> None:
    """`audit archive` deletes from the database the rows it wrote to segments: the segments
    must outlive the container that wrote them, and every service reads the same ones."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    state_dir = re.search(r"TOOLROUTER_STATE_DIR=(\S+)", text)
    assert state_dir, "the image sets its state directory"
    archive = str(Runtime(Settings(state_dir=Path(state_dir.group(1)))).archive_dir)
    # A named volume starts with the ownership of the image's directory it is mounted on.
    made = re.search(r"install -d -o toolrouter -g toolrouter [^&]*" + re.escape(archive), text)
    assert made, f"the image does not make {archive} for the toolrouter user"
    named = set(compose_file()["volumes"])
    services = compose_services()
    mounted = set()
    for name in {*procfile_commands(), "migrate"}:
        volumes = [str(v).split(":") for v in services[name].get("volumes", [])]
        found = [source for source, target, *_ in volumes if target == archive]
        assert len(found) == 1 and found[0] in named, f"{name} keeps no archive volume"
        mounted.add(found[0])
    assert len(mounted) == 1, mounted
