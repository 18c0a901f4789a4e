"""Demo keys for a fresh state directory, so `toolrouter up` works out of the box.

Their tokens are kept in ``<state_dir>/demo-keys.json`` (mode 0600) so that `up` can
print them again and `toolrouter call` can use them; real keys are never written down.
"""

from __future__ import annotations

import json
import os

from ..keys import KeyStore
from ..settings import Settings

DEMO_KEYS = {"agent": ("demo-agent", ["agent"]), "approver": ("demo-approver", ["approver"])}


def demo_key(settings: Settings, which: str) -> str | None:
    path = settings.state_dir / "demo-keys.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get(which)


def ensure_demo_keys(settings: Settings, keys: KeyStore) -> dict[str, str] | None:
    """Create the demo keys when the database has no keys at all; return the saved tokens."""
    path = settings.state_dir / "demo-keys.json"
    if not keys.list():
        tokens = {which: keys.create(name, roles) for which, (name, roles) in DEMO_KEYS.items()}
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(tokens, handle)
        return tokens
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    return None
