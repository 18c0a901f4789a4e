"""Demo keys for a fresh deployment, so `toolrouter up` works out of the box.

Their tokens are kept in ``<secrets_dir>/<namespace>/demo-keys.json`` (mode 0600, beside
the deployment's secret key and away from the state directory) so that `up` can print
them again and `toolrouter call` can use them; real keys are never written down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..files import private_dir
from ..messaging.namespace import Namespace

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
    return json.loads(path.read_text(encoding="utf-8")).get(which)


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
        return json.loads(path.read_text(encoding="utf-8"))
    return None
