"""The deployment's namespace: the prefix of every queue, channel and Redis key it uses.

Redis is shared transport, not a trust boundary, and two deployments may well share one
Redis database. Each gets its own names: ``TOOLROUTER_NAMESPACE``, else one derived from
where its database lives (the SQLite file, or the PostgreSQL host, port and database),
which every process of one deployment shares and no other deployment does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import Settings


def derive_namespace(settings: Settings) -> str:
    """``settings.namespace``, else ``tr-`` and a digest of the database's address."""
    if settings.namespace:
        return settings.namespace
    return "tr-" + hashlib.sha256(_database_address(settings).encode("utf-8")).hexdigest()[:10]


def _database_address(settings: Settings) -> str:
    default_file = str((settings.state_dir / "toolrouter.db").resolve())
    if not settings.database_url and not set(default_file) & {"%", "?"}:
        # The default SQLite file, named without parsing a URL (which would decode "%"
        # and cut at "?"): commands that only talk to the API start without SQLAlchemy.
        return "sqlite:" + default_file
    from sqlalchemy.engine import make_url

    from ..db.engine import normalize_url

    url = make_url(normalize_url(settings.resolved_database_url))
    if url.get_backend_name() == "sqlite":
        return "sqlite:" + str(Path(url.database or "").resolve())
    return f"{url.get_backend_name()}://{url.host or ''}:{url.port or ''}/{url.database}"


@dataclass(frozen=True, slots=True)
class Namespace:
    """Names in Redis for one deployment. Celery's own keys get ``prefix`` from kombu
    (``global_keyprefix``); toolrouter's keys and channels come from ``key``."""

    name: str

    @property
    def prefix(self) -> str:
        return f"{self.name}:"

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    @classmethod
    def of(cls, settings: Settings) -> Namespace:
        return cls(derive_namespace(settings))
