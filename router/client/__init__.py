"""The Python client, for agents and approvers: ``Client`` (blocking, on urllib3) and
``AsyncClient`` (asyncio, on aiohttp), with the same methods and the same answers.

Answers about a call are ``CallResult`` values, as the server gives them (SPEC §4), even
from a service that cannot be reached (``status="unavailable"``); the caller's own
mistakes raise errors from ``router.errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .answers import BatchReceipt, BatchStatus, Decided, Routed
    from .async_client import AsyncClient
    from .sync_client import Client

# Each client loads its HTTP library only when it is asked for.
_HOMES = {
    "AsyncClient": ".async_client",
    "Client": ".sync_client",
    "BatchReceipt": ".answers",
    "BatchStatus": ".answers",
    "Decided": ".answers",
    "Routed": ".answers",
}


__getattr__ = lazy_names(__name__, _HOMES)


__all__ = [
    # the clients
    "AsyncClient",
    "Client",
    # what they answer besides ``CallResult``
    "BatchReceipt",
    "BatchStatus",
    "Decided",
    "Routed",
]
