"""``toolrouter init``: a commented starter config and a handlers module, to edit."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

from .common import fail, os_problem

STARTER_FILES = ("toolrouter.yaml", "my_tools.py")


@click.command()
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Where to write them (default: here)",
)
def init(folder: Path) -> None:
    """Write a starter toolrouter.yaml (one ungated and one gated tool, every key
    commented) and my_tools.py with their handlers; never overwrites a file."""
    targets = [folder / name for name in STARTER_FILES]
    existing = [str(path) for path in targets if path.exists()]
    if existing:
        verb = "exists" if len(existing) == 1 else "exist"
        fail(f"{', '.join(existing)} already {verb}; nothing written")
    starter = resources.files("router.cli").joinpath("starter")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, path in zip(STARTER_FILES, targets, strict=True):
            path.write_text(starter.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
            click.echo(f"wrote {path}")
    except OSError as exc:
        fail(os_problem(exc))
    click.echo("next: `toolrouter tools` lists them; `toolrouter up` serves them")
