"""toolrouter's core: tools, the dispatcher, the store, the audit log, the HTTP API.

The core imports neither ``workers`` nor ``approvals``; it reaches them by Celery task name.
"""

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
