"""toolrouter's core: tools, the dispatcher, the store, the audit log, the HTTP API.

The core imports neither ``workers`` nor ``approvals``; it reaches them by Celery task name.
Its public names load on first use, so the command line starts without the client's or
the registry's dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

if TYPE_CHECKING:
    from .client import AsyncClient, Client
    from .clock import FakeClock, wall_clock_ms
    from .context import CallContext
    from .errors import (
        BadRequest,
        ConfigError,
        Conflict,
        Forbidden,
        NotAuthenticated,
        NotFound,
        RetryableError,
        ToolrouterError,
        Unavailable,
    )
    from .results import CallResult
    from .settings import Settings, get_settings
    from .status import AuditEvent, CallStatus, Role
    from .tools.registry import Tool, ToolRegistry

# Where each public name lives.
_HOMES = {
    "AsyncClient": ".client",
    "Client": ".client",
    "FakeClock": ".clock",
    "wall_clock_ms": ".clock",
    "CallContext": ".context",
    "BadRequest": ".errors",
    "ConfigError": ".errors",
    "Conflict": ".errors",
    "Forbidden": ".errors",
    "NotAuthenticated": ".errors",
    "NotFound": ".errors",
    "RetryableError": ".errors",
    "ToolrouterError": ".errors",
    "Unavailable": ".errors",
    "CallResult": ".results",
    "Settings": ".settings",
    "get_settings": ".settings",
    "AuditEvent": ".status",
    "CallStatus": ".status",
    "Role": ".status",
    "Tool": ".tools.registry",
    "ToolRegistry": ".tools.registry",
}


__getattr__ = lazy_names(__name__, _HOMES)


__all__ = [
    # agents and approvers
    "AsyncClient",
    "Client",
    # handlers
    "CallContext",
    "RetryableError",
    # outcomes and states
    "AuditEvent",
    "CallResult",
    "CallStatus",
    "Role",
    # tools and settings
    "Settings",
    "Tool",
    "ToolRegistry",
    "get_settings",
    # time
    "FakeClock",
    "wall_clock_ms",
    # errors
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "NotAuthenticated",
    "NotFound",
    "ToolrouterError",
    "Unavailable",
]
