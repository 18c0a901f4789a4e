"""The ``toolrouter`` command: one entry point for every process and for people."""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

import click

from ..errors import ConfigError, SchemaOutdated, ToolrouterError, Unavailable
from ..files import private_dir
from ..runtime import Runtime
from ..settings import get_settings
from . import approvals as approvals_cli
from . import batch as batch_cli
from . import calls as calls_cli
from . import processes


def runtime(prepare: bool = True, *, tools: bool = True) -> Runtime:
    """A runtime on the shared settings; schema checked (or upgraded, on SQLite) first, and
    the tool config loaded unless the command has no use for it (keys, audit, db)."""
    rt = Runtime(get_settings())
    if prepare:
        try:
            rt.prepare(check_tools=tools)
        except (ConfigError, SchemaOutdated, Unavailable) as exc:
            fail(str(exc))
    return rt


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """toolrouter: the router between agents and their tools."""
    # Like `python -m`, let handlers in the working directory ("mypkg.tools:hello") import:
    # the console script alone would not, while the processes it starts would.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


# -- processes ---------------------------------------------------------------------------


@main.command()
def up() -> None:
    """Run everything on this machine (api, workers, approval worker, beat, Flower)."""
    from .up import run_up

    sys.exit(run_up(get_settings()))


@main.command()
@click.option("--host", default=None, help="Default: TOOLROUTER_API_HOST")
@click.option("--port", type=int, default=None, help="Default: TOOLROUTER_API_PORT")
def api(host: str | None, port: int | None) -> None:
    """Run the HTTP API under uvicorn."""
    settings = get_settings()
    runtime()  # fail fast on config or schema before binding the port
    processes.exec_argv(processes.api_argv(settings, host=host, port=port))


@main.command()
@click.option("--risk", type=click.Choice(["low", "medium", "high"]), required=True)
@click.option("--concurrency", type=int, default=None)
def worker(risk: str, concurrency: int | None) -> None:
    """Run a Celery worker for one risk queue."""
    settings = get_settings()
    runtime()
    processes.exec_argv(processes.worker_argv(settings, risk, concurrency))


@main.group(invoke_without_command=True)
@click.pass_context
def approvals(ctx: click.Context) -> None:
    """Without a subcommand: run the approval worker (queues approvals and maintenance).

    With one: list, approve or deny requests as an approver (through the HTTP API).
    """
    if ctx.invoked_subcommand is None:
        settings = get_settings()
        runtime()
        processes.exec_argv(processes.approvals_argv(settings))


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
    settings = get_settings()
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


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Bring the schema up to date (Alembic)."""
    from ..migrate import head_revision, upgrade

    rt = runtime(prepare=False)
    try:
        upgrade(rt.engine)
    except Unavailable as exc:
        fail(str(exc))
    click.echo(f"schema at {head_revision()}")


@main.group()
def keys() -> None:
    """API keys."""


@keys.command("create")
@click.option("--name", required=True)
@click.option(
    "--role",
    "roles",
    multiple=True,
    required=True,
    help="agent, approver, operator, admin, or a custom approver role; repeatable",
)
def keys_create(name: str, roles: tuple[str, ...]) -> None:
    """Create a key; its token is printed once, alone on the last line."""
    rt = runtime(tools=False)
    try:
        token = rt.keys.create(name, list(roles))
    except (ValueError, ToolrouterError) as exc:
        fail(str(exc))
    click.echo(f"created key {name!r} with roles {', '.join(sorted(set(roles)))}")
    click.echo("the token below is shown only once:")
    click.echo(token)


@keys.command("revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Revoke a key by name."""
    rt = runtime(tools=False)
    try:
        rt.keys.revoke(name)
    except ToolrouterError as exc:
        fail(str(exc))
    click.echo(f"revoked key {name!r}")


@keys.command("list")
def keys_list() -> None:
    """List keys (never their tokens)."""
    for key in runtime(tools=False).keys.list():
        state = "revoked" if key["revoked"] else "active"
        click.echo(f"{key['name']}\t{','.join(key['roles'])}\t{state}")  # type: ignore[arg-type]


# -- tools and audit ---------------------------------------------------------------------


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Full definitions as JSON")
def tools(as_json: bool) -> None:
    """List the registered tools."""
    rt = runtime(prepare=False)
    try:
        registry = rt.registry
    except ConfigError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps([tool.describe() for tool in registry], indent=2))
        return
    for tool in registry:
        gate = "gated" if tool.spec.gated else "ungated"
        click.echo(f"{tool.name}\t{tool.spec.risk}\t{gate}\t{tool.spec.description}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="As JSON")
def stats(as_json: bool) -> None:
    """Per tool: calls, success rate, p50/p95 latency, cost, errors by type; cost per key."""
    from .. import stats as tool_stats

    rt = runtime()
    with rt.store.reading() as conn:
        rows = [tool_stats.tool_stats(conn, rt.registry, tool.name) for tool in rt.registry]
        spent = tool_stats.cost_by_key(conn, rt.registry)
    if as_json:
        click.echo(json.dumps({"tools": rows, "cost_by_key": spent}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("tool", "calls", "success", "p50 s", "p95 s", "cost", "errors")
    for row in rows:
        rate = row["success_rate"]
        table.add_row(
            row["tool"],
            str(row["calls"]),
            "-" if rate is None else f"{rate:.0%}",
            "-" if row["latency_p50_s"] is None else f"{row['latency_p50_s']:.3f}",
            "-" if row["latency_p95_s"] is None else f"{row['latency_p95_s']:.3f}",
            f"{row['cost']:g}",
            ", ".join(f"{k}:{v}" for k, v in row["errors_by_type"].items()),
        )
    console = Console()
    console.print(table)
    if spent:
        console.print("cost by key: " + ", ".join(f"{k} {v:g}" for k, v in spent.items()))


@main.group()
def audit() -> None:
    """The audit log."""


@audit.command("list")
@click.option("--tool", default=None)
@click.option("--event", default=None)
@click.option("--call-id", default=None)
@click.option("--after-seq", type=int, default=0)
@click.option("--limit", type=int, default=100)
def audit_list(
    tool: str | None, event: str | None, call_id: str | None, after_seq: int, limit: int
) -> None:
    """Print audit rows as JSON lines."""
    from .. import audit as audit_log

    rt = runtime(tools=False)
    with rt.store.reading() as conn:
        rows = audit_log.query(
            conn, tool=tool, event=event, call_id=call_id, after_seq=after_seq, limit=limit
        )
    for row in rows:
        click.echo(json.dumps(row, sort_keys=True))


@audit.command("verify")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON")
def audit_verify(as_json: bool) -> None:
    """Check the keyed chain, its signed head, every checkpoint and archive segment; names
    every row that does not hold."""
    rt = runtime(tools=False)
    try:
        report = rt.verify_audit()
    except (Unavailable, ConfigError) as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        sys.exit(0 if report.ok else 1)
    for line in report.lines:
        click.echo(line)
    if not report.ok:
        for problem in report.problems:
            click.echo(f"problem: {problem}", err=True)
        more = " (and more)" if report.truncated else ""
        fail(f"audit log does not verify: {len(report.problems)} problems{more}")
    click.echo(f"audit chain ok: {report.checked} rows verified")


@audit.command("head")
def audit_head_command() -> None:
    """Print the chain's current head, signed with the deployment's key, as JSON: keep a
    copy somewhere the database's host cannot write."""
    from dataclasses import asdict

    from .. import audit_head

    rt = runtime(tools=False)
    head = audit_head.current(rt.store, rt.keyring, rt.namespace.name, rt.clock)
    click.echo(json.dumps(asdict(head), sort_keys=True))


@audit.command("export")
@click.option("--after-seq", type=int, default=0)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default="-",
    help="File to write (default: standard output)",
)
def audit_export(after_seq: int, output: str) -> None:
    """Write the hot audit rows as JSON lines (a copy; the log is unchanged)."""
    from .. import archive

    rt = runtime(tools=False)
    with click.open_file(output, "w") as handle, rt.store.reading() as conn:
        count = archive.export(conn, handle, after_seq=after_seq)
    click.echo(f"exported {count} rows", err=True)


@audit.command("archive")
def audit_archive() -> None:
    """Move rows older than the hot window to a compressed segment (the one archival path)."""
    from .. import archive

    rt = runtime(tools=False)
    settings = rt.settings
    result = archive.archive(
        rt.store,
        rt.audit,
        rt.archive_dir,
        clock=rt.clock,
        hot_days=settings.audit_hot_days,
        archive_days=settings.audit_archive_days,
    )
    if result.segment is None:
        click.echo(f"nothing older than {settings.audit_hot_days:g} days to archive")
    else:
        click.echo(
            f"archived {result.rows} rows through seq {result.through_seq} "
            f"to {rt.archive_dir / result.segment}"
        )
    for name in result.pruned:
        click.echo(f"pruned {name} (older than {settings.audit_archive_days:g} days)")


# -- calls through the HTTP API -------------------------------------------------------------

main.add_command(calls_cli.call)
main.add_command(batch_cli.batch)


if __name__ == "__main__":
    main()
