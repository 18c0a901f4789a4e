"""The deployment's namespace: the prefix of every queue, channel and Redis key it uses.

Redis is shared transport, not a trust boundary, and two deployments may well share one
Redis database. Each gets its own names: ``TOOLROUTER_NAMESPACE``, else one derived from
where its database lives (the SQLite file, or the PostgreSQL host, port and database),
which every process of one deployment shares and no other deployment does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..settings import Settings

# kombu's Redis transport keeps a queue's messages in a list per priority step: the first
# under the queue's own name, the others under ``<queue><separator><step>``.
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


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

    def queue_keys(self, queue: str) -> tuple[str, ...]:
        """Every list in which ``queue``'s messages wait, one per priority step."""
        return tuple(
            f"{self.prefix}{queue}{PRIORITY_SEPARATOR}{step}" if step else self.prefix + queue
            for step in PRIORITY_STEPS
        )

    def queue_depths(self, client: Any, queues: Sequence[str]) -> dict[str, int | None]:
        """The messages waiting in each of ``queues``, read through the redis-py ``client``
        in one round trip; None for a queue one of whose keys is not a list (anyone who can
        write to Redis can put a string there), so the other queues are still read."""
        with client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for key in self.queue_keys(queue):
                    pipe.llen(key)
            lengths = iter(pipe.execute(raise_on_error=False))
        depths: dict[str, int | None] = {}
        for queue in queues:
            counts = [next(lengths) for _ in PRIORITY_STEPS]
            readable = all(isinstance(count, int) for count in counts)
            depths[queue] = sum(counts) if readable else None
        return depths

    @classmethod
    def of(cls, settings: Settings) -> Namespace:
        return cls(derive_namespace(settings))
