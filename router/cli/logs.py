"""``toolrouter logs``: the log files `toolrouter up` keeps, one per process."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import click

from ..canonical import shown_as_text
from .common import COUNT_MAX, fail, get_settings

FOLLOW_POLL_S = 0.2


@click.command()
@click.argument("process", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing lines as they are written")
@click.option(
    "-n",
    "--lines",
    "count",
    type=click.IntRange(0, COUNT_MAX),
    default=40,
    help="Lines of each log",
)
def logs(process: str | None, follow: bool, count: int) -> None:
    """Show the logs of the processes `toolrouter up` runs: all of them, or PROCESS's."""
    folder = get_settings().logs_dir
    found = sorted(folder.glob("*.log")) if folder.is_dir() else []
    if not found:
        fail(f"no logs in {folder}: `toolrouter up` writes them there")
    if process is not None:
        found = [path for path in found if path.stem == process]
        if not found:
            names = ", ".join(path.stem for path in sorted(folder.glob("*.log")))
            fail(f"no log for {process!r} in {folder}; there are: {names}")
    prefix = len(found) > 1
    width = max(len(path.stem) for path in found)
    offsets = {}
    for path in found:
        with path.open("rb") as handle:
            tail = deque(handle, maxlen=count)
            offsets[path] = handle.tell()
        _show(path, list(tail), width if prefix else None)
    while follow:
        time.sleep(FOLLOW_POLL_S)
        for path in found:
            with path.open("rb") as handle:
                handle.seek(offsets[path])
                fresh = handle.readlines()
                offsets[path] = handle.tell()
            _show(path, fresh, width if prefix else None)


def _show(path: Path, lines: list[bytes], width: int | None) -> None:
    for raw in lines:
        # Lines quote what agents and remote servers wrote: shown, never obeyed.
        text = shown_as_text(raw.decode("utf-8", "replace").removesuffix("\n"))
        click.echo(f"{path.stem:<{width}} | {text}" if width is not None else text)
