"""``toolrouter tools``, ``toolrouter route`` and ``toolrouter stats``: the registered tools,
which fit a task, and how they fare."""

from __future__ import annotations

import json

import click

from ..canonical import shown_as_text
from ..constants import ROUTE_LIMIT
from ..errors import ConfigError, RequestError
from .common import fail, runtime


@click.command()
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
        # An imported tool's description is its MCP server's words: shown, never obeyed.
        described = shown_as_text(tool.spec.description)
        click.echo(f"{tool.name}\t{tool.spec.risk}\t{gate}\t{described}")


@click.command()
@click.argument("task", default="")
@click.option("--strategy", help="lexical, semantic, hybrid, llm, capability, cost or rules")
@click.option("--capability", help="Only tools that declare this capability")
@click.option("--limit", type=click.IntRange(1, 100), default=ROUTE_LIMIT, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="As POST /v1/route answers")
def route(
    task: str, strategy: str | None, capability: str | None, limit: int, as_json: bool
) -> None:
    """Rank the tools for TASK as POST /v1/route does, with each one's reason.

    TASK may be left out, as the API's task may: the tools of a --capability are then
    ranked by the capability strategy, and --strategy cost ranks every tool; the strategies
    that rank by text need a TASK or a --capability.
    """
    rt = runtime()
    try:
        ranking = rt.ranker.rank(task=task, strategy=strategy, capability=capability, limit=limit)
    except (ConfigError, RequestError) as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(ranking.answer(limit), indent=2))
        return
    click.echo(f"strategy: {ranking.strategy.value}")
    if ranking.fallback:
        click.echo(shown_as_text(ranking.fallback))
    for candidate in ranking.candidates[:limit]:
        reason = shown_as_text(candidate.reason)
        click.echo(f"{candidate.tool}\t{candidate.score:.4f}\t{reason}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="As JSON")
def stats(as_json: bool) -> None:
    """Per tool: calls, success rate, p50/p95 latency, cost, errors by type; cost per key."""
    from ..tools import stats as tool_stats

    rt = runtime(existing=True)
    with rt.store.reading() as conn:
        rows = [tool_stats.tool_stats(conn, rt.registry, tool.name) for tool in rt.registry]
        spent = tool_stats.cost_by_key(conn, rt.registry)
    if as_json:
        click.echo(json.dumps({"tools": rows, "cost_by_key": spent}, indent=2))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table("tool", "calls", "success", "p50 s", "p95 s", "cost", "errors")
    # A long name wraps rather than being cut, so two tools never read the same.
    table.columns[0].overflow = "fold"
    # Tool, error and key names are anyone's words: shown as text, never as markup.
    for row in rows:
        rate = row["success_rate"]
        table.add_row(
            escape(row["tool"]),
            str(row["calls"]),
            "-" if rate is None else f"{rate:.0%}",
            "-" if row["latency_p50_s"] is None else f"{row['latency_p50_s']:.3f}",
            "-" if row["latency_p95_s"] is None else f"{row['latency_p95_s']:.3f}",
            f"{row['cost']:g}",
            escape(", ".join(f"{k}:{v}" for k, v in row["errors_by_type"].items())),
        )
    console = Console(soft_wrap=True)  # the cost line stays one line when piped
    console.print(table)
    if spent:
        console.print("cost by key: " + escape(", ".join(f"{k} {v:g}" for k, v in spent.items())))
