"""``toolrouter batch submit|status|results``: many calls from a JSON-lines file.

Each non-blank line of the file is one call, ``{"tool", "args", "idempotency_key"?}``.
A line without a key of its own gets one derived from the file's SHA-256 and its line
number, and the batch is named by the file's hash: running the same command again after
an interruption adds only the lines that were not stored yet, to the same batch.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..canonical import shown_as_text
from ..chunking import ranges_within
from ..errors import RequestError, Unavailable
from .children import api_port
from .common import Seconds, get_settings, local_url
from .http import api_key

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from ..client import BatchStatus, Client

# Lines per request (fewer where they would pass the server's body limit): each request is
# stored in one go, so this is the progress step and what an interruption can lose
# (nothing: a re-run replays what was stored).
CHUNK_LINES = 2000
POLL_S = 0.5
KEY_OPTION = click.option(
    "--key",
    envvar="TOOLROUTER_KEY",
    default=None,
    help="Agent key (default: $TOOLROUTER_KEY, else the demo agent key)",
)


@dataclass
class BatchFile:
    """The lines to send (keys filled in), the file line each came from, local problems."""

    digest: str
    lines: list[str] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)
    problems: dict[int, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path, line_limit: int) -> BatchFile:
        """The file's calls; a line over ``line_limit`` bytes, which the server would not
        take, is a problem here, as a line that is not UTF-8 is."""
        data = path.read_bytes()
        batch = cls(digest=hashlib.sha256(data).hexdigest())
        # Editors on Windows start a UTF-8 file with a byte order mark; JSON holds none.
        text_start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        for number, raw in enumerate(data[text_start:].split(b"\n"), start=1):
            if not raw.strip():
                continue  # the server skips blank lines too; they take no index
            batch.line_numbers.append(number)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                batch.problems[number] = "not valid UTF-8"
                batch.lines.append("null")  # rejected by the server at this index
                continue
            line = batch._with_key(text, number)
            if (size := len(line.encode("utf-8"))) > line_limit:
                batch.problems[number] = f"call is {size} bytes, over the limit of {line_limit}"
                line = "null"
            batch.lines.append(line)
        return batch

    def requests(self, most_lines: int, most_bytes: int) -> Iterator[range]:
        """The lines of each request: a request's body is at most ``most_bytes``."""
        weights = [len(line.encode("utf-8")) + 1 for line in self.lines]
        return ranges_within(weights, min(CHUNK_LINES, most_lines), most_bytes)

    def _with_key(self, text: str, number: int) -> str:
        try:
            call = json.loads(text)
        except (ValueError, RecursionError):
            return text  # sent as it is: the server says why it is not a call
        if isinstance(call, dict) and "idempotency_key" not in call:
            call["idempotency_key"] = f"{self.digest[:32]}:{number}"
            return json.dumps(call, ensure_ascii=True, separators=(",", ":"))
        return text


def _client(key: str | None) -> Client:
    settings = get_settings()
    token = api_key(settings, key, "agent")
    from ..client import Client  # here: --help needs no HTTP library

    return Client(local_url(settings.api_host, api_port(settings)), token)


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group()
def batch() -> None:
    """Submit many calls at once, follow them, collect their results."""


@batch.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="Follow the calls until every one has finished")
@click.option("--timeout", "timeout_s", type=Seconds(), default=3600.0, help="Seconds to --wait")
@KEY_OPTION
def submit(file: Path, wait: bool, timeout_s: float, key: str | None) -> None:
    """Submit FILE (JSON lines, one call each). Safe to run again after an interruption.

    Prints the batch id alone on the last line; exits 0 when no line was rejected (and,
    with --wait, every call succeeded).
    """
    settings = get_settings()
    # A line sent alone is a body of its own, with its newline.
    source = BatchFile.read(file, min(settings.call_body_bytes, settings.max_batch_bytes - 1))
    if not source.lines:
        _fail(f"{file} has no calls")
    from rich.console import Console  # here: only a submission draws progress
    from rich.markup import escape

    # Unwrapped: a piped summary line stays one line, whatever the width.
    console = Console(stderr=True, soft_wrap=True)
    accepted = replayed = 0
    rejected: list[tuple[int, str]] = []
    elsewhere: list[tuple[int, str]] = []
    batch_id = ""
    try:
        with _client(key) as client:
            with _progress(console) as progress:
                task = progress.add_task("submitting", total=len(source.lines))
                for lines in source.requests(settings.max_batch_calls, settings.max_batch_bytes):
                    low, chunk = lines.start, source.lines[lines.start : lines.stop]
                    receipt = client.batch_lines(
                        chunk, idempotency_key=f"file:{source.digest}", offset=low
                    )
                    batch_id = receipt.batch_id
                    accepted += receipt.accepted
                    replayed += receipt.replayed
                    rejected += [(low + index, error) for index, error in receipt.rejected]
                    elsewhere += [(low + i, call) for i, call in receipt.replayed_elsewhere]
                    progress.advance(task, len(chunk))
            # The server's words quote the file (tool names, argument keys): shown as text,
            # never as markup, and with escapes that Rich passes on written out.
            console.print(
                f"batch {escape(batch_id)}: {len(source.lines)} calls, {accepted} new, "
                f"{replayed} already stored, {len(rejected)} rejected"
            )
            for index, error in rejected[:20]:
                number = source.line_numbers[index]
                problem = shown_as_text(source.problems.get(number, error))
                console.print(f"  line {number}: {escape(problem)}")
            if len(rejected) > 20:
                console.print(f"  … and {len(rejected) - 20} more")
            _show_elsewhere(console, source, elsewhere)
            try:
                status = _follow(client, batch_id, timeout_s, console) if wait else None
            except KeyboardInterrupt:
                # Submitted whole: the id is what the user needs to follow it again.
                click.echo("interrupted while waiting: the batch goes on", err=True)
                click.echo(batch_id)
                sys.exit(130)
    except (RequestError, Unavailable) as exc:
        _fail(str(exc))
    click.echo(batch_id)
    succeeded = status is None or status.counts.get("succeeded", 0) == status.total
    sys.exit(0 if not rejected and succeeded else 1)


def _show_elsewhere(console: Console, source: BatchFile, found: list[tuple[int, str]]) -> None:
    """Lines whose key names a call stored before outside this batch: `batch results`
    will not show them."""
    if not found:
        return
    console.print(f"  {len(found)} already stored outside this batch's results (by their keys):")
    for index, call_id in found[:20]:
        console.print(f"  line {source.line_numbers[index]}: {call_id}", markup=False)
    if len(found) > 20:
        console.print(f"  … and {len(found) - 20} more")


def _progress(console: Console) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _follow(client: Client, batch_id: str, timeout_s: float, console: Console) -> BatchStatus:
    """Poll the batch's counts (a status read every half second) until all calls finished."""
    from rich.markup import escape

    deadline = time.monotonic() + timeout_s
    status = client.batch_status(batch_id)
    with _progress(console) as progress:
        task = progress.add_task("running", total=status.total)
        while True:
            active = sum(status.counts.get(s, 0) for s in ("queued", "running", "pending"))
            progress.update(task, total=status.total, completed=status.total - active)
            if status.done or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
            status = client.batch_status(batch_id)
    counts = ", ".join(f"{n} {name}" for name, n in sorted(status.counts.items()) if n)
    console.print(
        f"batch {escape(batch_id)}: {escape(counts or 'no calls')}"
        + ("" if status.done else " (timed out)")
    )
    return status


@batch.command("status")
@click.argument("batch_id")
@KEY_OPTION
def status(batch_id: str, key: str | None) -> None:
    """Counts of a batch's calls by status, as JSON."""
    try:
        with _client(key) as client:
            current = client.batch_status(batch_id)
    except (RequestError, Unavailable) as exc:
        _fail(str(exc))
    click.echo(
        json.dumps(
            {
                "batch_id": current.batch_id,
                "total": current.total,
                "counts": dict(current.counts),
                "submitted": current.submitted,
                "rejected": current.rejected,
                "done": current.done,
            },
            indent=2,
        )
    )


@batch.command("results")
@click.argument("batch_id")
@KEY_OPTION
def results(batch_id: str, key: str | None) -> None:
    """Print the batch's call results as JSON lines, in batch order (each with its index)."""
    try:
        with _client(key) as client:
            for index, result in client.batch_results(batch_id):
                line = {**result.to_dict(), "index": index}
                click.echo(json.dumps(line, ensure_ascii=True, separators=(",", ":")))
    except (RequestError, Unavailable) as exc:
        _fail(str(exc))
