"""``toolrouter audit``: read, verify, export and archive the audit log."""

from __future__ import annotations

import json
import sys

import click

from ..errors import ConfigError, Unavailable
from ..status import AuditEvent
from .common import COUNT_MAX, fail, os_problem, runtime


@click.group()
def audit() -> None:
    """The audit log of an existing deployment: where there is none (no database in the
    state directory, or one with no schema) each command says so and creates nothing."""


@audit.command("list")
@click.option("--tool", default=None)
# A choice, as GET /v1/audit refuses an unknown event: a typo would list nothing.
@click.option("--event", type=click.Choice([str(event) for event in AuditEvent]), default=None)
@click.option("--call-id", default=None)
@click.option("--after-seq", type=click.IntRange(0, COUNT_MAX), default=0)
@click.option("--limit", type=click.IntRange(1, COUNT_MAX), default=100, help="The first N rows")
@click.option(
    "--last", type=click.IntRange(1, COUNT_MAX), default=None, help="The last N rows instead"
)
def audit_list(
    tool: str | None,
    event: str | None,
    call_id: str | None,
    after_seq: int,
    limit: int,
    last: int | None,
) -> None:
    """Print audit rows as JSON lines, oldest first."""
    from ..audit import log as audit_log

    rt = runtime(tools=False, existing=True)
    with rt.store.reading() as conn:
        rows = audit_log.query(
            conn,
            tool=tool,
            event=event,
            call_id=call_id,
            after_seq=after_seq,
            limit=limit if last is None else last,
            newest=last is not None,
        )
    for row in rows:
        click.echo(json.dumps(row, sort_keys=True))


@audit.command("verify")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON")
def audit_verify(as_json: bool) -> None:
    """Check the keyed chain, its signed head, every checkpoint and archive segment; names
    every row that does not hold."""
    rt = runtime(tools=False, existing=True, trust=False)
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
        count = len(report.problems)
        more = " (and more)" if report.truncated else ""
        fail(f"audit log does not verify: {count} problem{'' if count == 1 else 's'}{more}")
    archived = f", and {report.archived} in archive segments" if report.archived else ""
    click.echo(f"audit chain ok: {report.checked} rows verified in the database{archived}")


@audit.command("adopt-key")
def audit_adopt_key() -> None:
    """Once, for a database whose audit log was written before the deployment had a secret
    key (an upgrade from 0.1): record that its rows so far are chained without the key,
    and every later row with it. Refused where the log shows the key was used before:
    then its deployment row was deleted."""
    rt = runtime(tools=False, existing=True, trust=False)
    try:
        found = rt.adopt_key()
    except (Unavailable, ConfigError) as exc:
        fail(str(exc))
    click.echo(
        f"the keyed audit chain begins after seq {found.keyed_from_seq}: rows up to it are "
        "checked as a plain SHA-256 chain"
    )


@audit.command("head")
def audit_head_command() -> None:
    """Print the chain's current head, signed with the deployment's key, as JSON: keep a
    copy somewhere the database's host cannot write."""
    from dataclasses import asdict

    from ..audit import head as audit_head

    rt = runtime(tools=False, existing=True)
    head = audit_head.current(rt.store, rt.keyring, rt.namespace.name, rt.clock)
    click.echo(json.dumps(asdict(head), sort_keys=True))


@audit.command("export")
@click.option("--after-seq", type=click.IntRange(0, COUNT_MAX), default=0)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default="-",
    help="File to write (default: standard output)",
)
def audit_export(after_seq: int, output: str) -> None:
    """Write the hot audit rows as JSON lines (a copy; the log is unchanged)."""
    from ..audit import archive

    rt = runtime(tools=False, existing=True)
    try:
        with click.open_file(output, "w") as handle, rt.store.reading(snapshot=True) as conn:
            count = archive.export(conn, handle, after_seq=after_seq)
    except OSError as exc:
        fail(f"cannot write the export: {os_problem(exc)}")
    click.echo(f"exported {count} rows", err=True)


@audit.command("archive")
def audit_archive() -> None:
    """Move rows older than the hot window to a compressed segment (the one archival path)."""
    from ..audit import archive

    rt = runtime(tools=False, existing=True)
    settings = rt.settings
    try:
        result = archive.archive(
            rt.store,
            rt.audit,
            rt.archive_dir,
            clock=rt.clock,
            hot_days=settings.audit_hot_days,
            archive_days=settings.audit_archive_days,
        )
    except OSError as exc:
        fail(f"cannot archive the audit log: {os_problem(exc)}")
    if result.segment is None:
        click.echo(f"nothing older than {settings.audit_hot_days:g} days to archive")
    else:
        click.echo(
            f"archived {result.rows} rows through seq {result.through_seq} "
            f"to {(rt.archive_dir / result.segment).resolve()}"
        )
    for name in result.pruned:
        click.echo(f"pruned {name} (older than {settings.audit_archive_days:g} days)")
