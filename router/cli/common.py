"""What every command of the ``toolrouter`` command line shares: the runtime, and failing."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..errors import ConfigError, SchemaOutdated, Unavailable

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..settings import Settings


# Counts and audit seqs on the command line: what a database integer holds, as the API takes.
COUNT_MAX = 2**62
# Waits and timeouts: a year; longer would overflow the socket's timeout.
SECONDS_MAX = 365 * 86400.0


class Seconds(click.ParamType):
    """A finite number of seconds from 0 to ``SECONDS_MAX`` (``click.FloatRange`` lets NaN
    through, and a socket refuses infinity with a traceback)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not 0 <= number <= SECONDS_MAX:
            self.fail(f"{value!r} is not a number of seconds from 0 to {SECONDS_MAX:g}", param, ctx)
        return number


def get_settings() -> Settings:
    """The shared settings. A setting that cannot be used stops the command, named, without
    a traceback. Imported on first use: help needs no settings, and pydantic's are the
    larger part of the command line's start."""
    from ..settings import settings_or_exit

    return settings_or_exit()


def runtime(
    prepare: bool = True, *, tools: bool = True, existing: bool = False, trust: bool = True
) -> Runtime:
    """A runtime on the shared settings; schema checked (or upgraded, on SQLite) first, and
    the tool config loaded unless the command has no use for it (keys, audit, db).
    ``existing``: the command reads a deployment, so it stops, creating nothing, where
    there is none (a cron job run from the wrong directory). ``trust``: the database's
    deployment row is checked against the key (``audit verify`` reports it instead)."""
    # Imported here: commands that talk to the API start without the runtime's weight.
    from ..runtime import Runtime

    rt = Runtime(get_settings())
    if existing:
        _require_deployment(rt)
    if prepare:
        try:
            rt.prepare(check_tools=tools, trust=trust)
        except (ConfigError, SchemaOutdated, Unavailable) as exc:
            fail(str(exc))
        except OSError as exc:  # the state or secrets directory cannot be made or written
            fail(os_problem(exc))
    return rt


def _require_deployment(rt: Runtime) -> None:
    """Stop unless the database holds a deployment: checked before the engine or the key is
    made, as either would create one (a SQLite file, a key file)."""

    from ..db.migrate import current_revision

    settings = rt.settings
    if (state_dir := settings.state_dir.resolve()).exists() and not state_dir.is_dir():
        fail(f"{state_dir} is not a directory")
    if settings.database_url:
        where = "the database TOOLROUTER_DATABASE_URL names"
        hint = "check TOOLROUTER_DATABASE_URL, or make the schema: run `toolrouter db upgrade`"
    else:
        where = f"the state directory {settings.state_dir.resolve()}"
        hint = "run this where the deployment runs, or set TOOLROUTER_STATE_DIR"
    if (missing := missing_database(settings)) is not None:
        fail(f"no deployment in {where}: {missing} does not exist; {hint}")
    try:
        revision = current_revision(rt.engine)
    except Unavailable as exc:
        fail(str(exc))
    if revision is None:
        fail(f"no deployment in {where}: its database has no schema; {hint}")


def missing_database(settings: Settings) -> Path | None:
    """The SQLite file the settings name, where it does not exist yet: a command run
    outside a deployment's folder would make a new deployment there."""
    if not settings.is_sqlite:
        return None
    from sqlalchemy.engine import make_url

    path = make_url(settings.resolved_database_url).database
    if not path or path == ":memory:" or Path(path).exists():
        return None
    return Path(path).resolve()


def os_problem(exc: OSError) -> str:
    """An ``OSError`` as its file and the reason, in words: a file where a directory is
    wanted is said so (``mkdir`` reports it as "File exists")."""
    if exc.filename is None:
        return exc.strerror or str(exc)
    path = Path(os.fsdecode(exc.filename)).resolve()
    if isinstance(exc, FileExistsError) and not path.is_dir():
        return f"{path} is not a directory"
    return f"{path}: {exc.strerror or exc}"


def fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def local_url(host: str, port: int) -> str:
    """``http://host:port`` for reaching a server bound to ``host`` from this machine: a
    wildcard address is reached on loopback, and an IPv6 address goes in brackets."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
