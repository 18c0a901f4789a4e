"""Demo keys for a fresh deployment, so `toolrouter up` works out of the box.

Their tokens are kept in ``<secrets_dir>/<namespace>/demo-keys.json`` (mode 0600, beside
the deployment's secret key and away from the state directory) so that `up` can print
them again and `toolrouter call` can use them; real keys are never written down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..files import private_dir
from ..messaging.namespace import Namespace
from .common import fail

if TYPE_CHECKING:
    from ..auth.keys import KeyStore
    from ..settings import Settings

DEMO_KEYS = {"agent": ("demo-agent", ["agent"]), "approver": ("demo-approver", ["approver"])}


def demo_keys_file(settings: Settings) -> Path:
    return settings.resolved_secrets_dir / Namespace.of(settings).name / "demo-keys.json"


def demo_key(settings: Settings, which: str) -> str | None:
    path = demo_keys_file(settings)
    if not path.exists():
        return None
    try:
        saved = _read(path)
    except ValueError as exc:
        fail(f"{exc}; pass --key or set TOOLROUTER_KEY")
    token = saved.get(which)
    return token if isinstance(token, str) else None


def _read(path: Path) -> dict[str, Any]:
    """The tokens ``up`` saved; ``ValueError`` naming the file if it is not what up wrote."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"cannot read the demo keys in {path}: {exc}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path} does not hold the demo keys toolrouter up wrote")
    return saved


def ensure_demo_keys(settings: Settings, keys: KeyStore) -> dict[str, str] | None:
    """Create the demo keys when the database has no keys at all; return the saved tokens."""
    path = demo_keys_file(settings)
    if not keys.list():
        tokens = {which: keys.create(name, roles) for which, (name, roles) in DEMO_KEYS.items()}
        private_dir(path.parent.parent)
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(tokens, handle)
        return tokens
    if path.exists():
        try:
            saved = _read(path)
        except ValueError as exc:
            # Only shown by up: the deployment runs all the same, its keys are in the database.
            click.echo(f"warning: {exc}; the demo keys are not shown", err=True)
            return None
        return {which: token for which, token in saved.items() if isinstance(token, str)}
    return None
