"""The ``toolrouter`` command: one entry point for every process and for people."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ..errors import ToolrouterError
from ..files import private_dir
from . import approvals as approvals_cli
from . import audit as audit_cli
from . import batch as batch_cli
from . import calls as calls_cli
from . import db as db_cli
from . import init as init_cli
from . import keys as keys_cli
from . import logs as logs_cli
from . import processes
from . import status as status_cli
from . import tools as tools_cli
from .common import fail, get_settings, runtime


class _Commands(click.Group):
    """toolrouter's commands; text that cannot be sent or stored is a usage error."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UnicodeEncodeError as exc:
            # Bytes that are not UTF-8 arrive as lone surrogates: a path may hold them, a
            # request, a file's text or a database cannot. Raised before anything is sent.
            raise click.UsageError(f"not UTF-8 text: {_shown(exc)}") from None


def _shown(exc: UnicodeEncodeError) -> str:
    """The bytes given around the first that is not UTF-8, as escapes."""
    text = exc.object[max(0, exc.start - 20) : exc.end + 20]
    try:
        return os.fsencode(text).decode("ascii", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("ascii")


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """toolrouter: the router between agents and their tools."""
    # Like `python -m`, let handlers in the working directory ("mypkg.tools:hello") import:
    # the console script alone would not, while the processes it starts would.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


# -- processes ---------------------------------------------------------------------------


@main.command(
    epilog=(
        "Settings come from the environment, among them "
        "TOOLROUTER_API_PORT (8000), TOOLROUTER_FLOWER_PORT (5555), TOOLROUTER_STATE_DIR "
        "(.toolrouter), TOOLROUTER_CONFIG (toolrouter.yaml), TOOLROUTER_REDIS_URL and "
        "TOOLROUTER_DATABASE_URL; every one is in the docs' Settings page (its source: "
        "router/settings.py)."
    )
)
@click.option("--verbose", is_flag=True, help="Also stream every process's log here")
def up(verbose: bool) -> None:
    """Run everything on this machine (api, workers, approval and notification workers, beat,
    Flower)."""
    from .up import run_up

    sys.exit(run_up(get_settings(), verbose=verbose))


@main.command()
@click.option("--host", default=None, help="Default: TOOLROUTER_API_HOST")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Default: TOOLROUTER_API_PORT"
)
def api(host: str | None, port: int | None) -> None:
    """Run the HTTP API under uvicorn."""
    from .preflight import Server, UpRefused, check_port

    settings = get_settings()
    try:
        setting = "--port" if port else "TOOLROUTER_API_PORT"
        check_port(Server.API, setting, host or settings.api_host, port or settings.api_port)
    except UpRefused as exc:
        fail(str(exc))
    runtime()  # fail fast on config or schema before binding the port
    processes.exec_argv(processes.api_argv(settings, host=host, port=port))


@main.command()
@click.option("--risk", type=click.Choice(["low", "medium", "high"]), required=True)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Pool processes; default: TOOLROUTER_WORKER_CONCURRENCY",
)
def worker(risk: str, concurrency: int | None) -> None:
    """Run a Celery worker for one risk queue."""
    settings = get_settings()
    runtime()
    processes.exec_argv(processes.worker_argv(settings, risk, concurrency))


@main.command("approval-worker")
def approval_worker() -> None:
    """Run the approval worker (queues approvals and maintenance)."""
    settings = get_settings()
    runtime()
    processes.exec_argv(processes.approvals_argv(settings))


@main.command("notification-worker")
def notification_worker() -> None:
    """Run the notification worker (queue notifications: messages to approvers)."""
    from .preflight import public_url_warning

    settings = get_settings()
    notifies = bool(runtime().tool_config.notifications.channels)
    # Its links name where it runs unless told otherwise: say so where they are made.
    if warning := public_url_warning(settings, notifies, on_its_own=True):
        click.echo(warning, err=True)
    processes.exec_argv(processes.notifications_argv(settings))


@main.group()
def approvals() -> None:
    """List, approve or deny requests as an approver (through the HTTP API)."""


approvals_cli.register(approvals)


@main.command()
def beat() -> None:
    """Run Celery beat: reaper, reconciler, expiry."""
    settings = get_settings()
    runtime()
    # Beat keeps its schedule file there; on PostgreSQL nothing else creates the directory.
    private_dir(settings.state_dir)
    processes.exec_argv(processes.beat_argv(settings))


@main.command()
def flower() -> None:
    """Run Flower on TOOLROUTER_FLOWER_PORT with basic auth."""
    from .preflight import Server, UpRefused, check_ports

    settings = get_settings()
    try:
        check_ports(settings, (Server.FLOWER,))
    except UpRefused as exc:
        fail(str(exc))
    processes.exec_argv(processes.flower_argv(settings), processes.flower_env(settings))


@main.command()
@click.option(
    "--key",
    envvar="TOOLROUTER_KEY",
    default=None,
    help="Agent key the calls are made with (default: $TOOLROUTER_KEY, else the demo agent key)",
)
def mcp(key: str | None) -> None:
    """Serve the tools over MCP on stdin/stdout, for clients that launch their servers.

    Calls go through the same dispatcher, approvals and audit log as the HTTP API, as the
    key's name. Over HTTP, MCP clients connect to /mcp on the API instead.
    """
    from ..mcp import run_stdio
    from .demo import demo_key

    rt = runtime()
    token = key or demo_key(rt.settings, "agent")
    if not token:
        fail("no key: pass --key or set TOOLROUTER_KEY")
    try:
        rt.keys.authenticate(token)
    except ToolrouterError as exc:
        fail(str(exc))
    try:
        run_stdio(rt, token)
    finally:
        rt.close()


# -- database and keys -------------------------------------------------------------------


main.add_command(db_cli.db)
main.add_command(init_cli.init)
main.add_command(logs_cli.logs)
main.add_command(status_cli.status)
main.add_command(keys_cli.keys)
main.add_command(tools_cli.tools)
main.add_command(tools_cli.route)
main.add_command(tools_cli.stats)
main.add_command(audit_cli.audit)

# -- calls through the HTTP API -------------------------------------------------------------

main.add_command(calls_cli.call)
main.add_command(calls_cli.cancel)
main.add_command(batch_cli.batch)


if __name__ == "__main__":
    main()
