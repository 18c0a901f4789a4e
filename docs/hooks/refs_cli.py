"""The CLI reference, from the ``toolrouter`` Click command's own help."""

from __future__ import annotations

import click
from refs_markdown import paragraphs

from router.cli.main import main as toolrouter


def cli_reference() -> str:
    return "\n\n".join(_command(toolrouter, ("toolrouter",), None))


def commands() -> list[str]:
    """Every command and subcommand, as typed (``toolrouter keys create``)."""
    found: list[str] = []

    def walk(command: click.Command, path: tuple[str, ...], parent: click.Context | None) -> None:
        found.append(" ".join(path))
        ctx = _context(command, path, parent)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, (*path, name), ctx)

    walk(toolrouter, ("toolrouter",), None)
    return found


def _command(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> list[str]:
    ctx = _context(command, path, parent)
    name = " ".join(path)
    level = "#" * min(len(path) + 1, 4)
    parts = [f"{level} `{name}`", f"```\n{ctx.get_usage()}\n```"]
    if command.help:
        parts.append(paragraphs(_unwrap(command.help), where=name))
    arguments = [p for p in command.get_params(ctx) if isinstance(p, click.Argument)]
    if arguments:
        parts.append(
            "Arguments: " + ", ".join(f"`{p.human_readable_name}`" for p in arguments) + "."
        )
    options = []
    for param in command.get_params(ctx):
        # Every command has -h/--help; the page says so once.
        if not isinstance(param, click.Option) or param is command.get_help_option(ctx):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        flags, text = record
        options.append(f"- `{flags}`" + (f": {' '.join(text.split())}" if text else ""))
    if options:
        parts.append("Options:\n\n" + "\n".join(options))
    if isinstance(command, click.Group):
        subs = []
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                subs.append((sub_name, sub))
        listing = [
            f"- [`{name} {sub_name}`](#{_anchor(name, sub_name)}): "
            f"{sub.get_short_help_str(limit=200)}"
            for sub_name, sub in subs
        ]
        parts.append("Commands:\n\n" + "\n".join(listing))
        for sub_name, sub in subs:
            parts += _command(sub, (*path, sub_name), ctx)
    return parts


def _context(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None
) -> click.Context:
    """The context Click would make for ``command``, with its own context settings."""
    return click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)


def _anchor(*words: str) -> str:
    return "-".join(" ".join(words).split())


def _unwrap(text: str) -> str:
    """Click's help text without its ``\\b`` no-rewrap markers."""
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b")
