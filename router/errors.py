"""The exceptions toolrouter raises, under one root.

    ToolrouterError
    ├── ConfigError              bad tool config: file, tool and reason
    ├── SchemaOutdated           the database schema is behind the code
    ├── Unavailable              a dependency is down (HTTP 503)
    │   ├── StoreUnavailable
    │   └── BrokerUnavailable
    ├── RequestError             the caller asked for something it cannot have
    │   ├── BadRequest           malformed body or parameter (HTTP 422)
    │   ├── PayloadTooLarge      over the size limit (HTTP 413)
    │   ├── NotAuthenticated     no key, or a bad or revoked one (HTTP 401)
    │   ├── Forbidden            the key lacks the role (HTTP 403)
    │   ├── NotFound             unknown call, request, batch or tool (HTTP 404)
    │   └── Conflict             the state forbids it (HTTP 409)
    │       ├── IdempotencyConflict
    │       └── NotCancellable
    ├── CallLost                 a tool server's connection ended with a call out to it
    ├── AnswerTooLarge           a tool server's answer was cut off at the read limit
    ├── McpProtocolError         an MCP server sent what is not JSON-RPC
    ├── ToolListTooLong          an MCP server's tool list is past what is read of it
    └── RetryableError           raised by a handler: this failure may be retried

Calls themselves never raise: their outcomes are values (``router.results``).
"""

from __future__ import annotations


class ToolrouterError(Exception):
    """Root of every error toolrouter raises on purpose."""


class ConfigError(ToolrouterError):
    """Raised when the tool config cannot be loaded: names the file, the tool and the reason."""

    def __init__(self, reason: str, *, file: str | None = None, tool: str | None = None) -> None:
        self.reason, self.file, self.tool = reason, file, tool
        where = ", ".join(
            part
            for part in (f"file {file}" if file else "", f"tool {tool!r}" if tool else "")
            if part
        )
        super().__init__(
            f"config error ({where}): {reason}" if where else f"config error: {reason}"
        )


class SchemaOutdated(ToolrouterError):
    """Raised when the database schema is not at the code's Alembic head."""


class Unavailable(ToolrouterError):
    """Raised when a dependency the service needs does not answer."""

    def __init__(self, message: str) -> None:
        super().__init__(f"unavailable: {message}")


class StoreUnavailable(Unavailable):
    """Raised when the database cannot be reached or refuses the transaction."""


class BrokerUnavailable(Unavailable):
    """Raised when Redis does not take a message."""


class RequestError(ToolrouterError):
    """Raised when a caller's request cannot be served; carries the HTTP status."""

    status_code = 400


class BadRequest(RequestError):
    """Raised when a body or parameter is malformed."""

    status_code = 422


class PayloadTooLarge(RequestError):
    """Raised when a body or the arguments exceed the size limit."""

    status_code = 413


class NotAuthenticated(RequestError):
    """Raised when the bearer key is missing, unknown or revoked."""

    status_code = 401


class Forbidden(RequestError):
    """Raised when the key lacks a role the action needs."""

    status_code = 403


class NotFound(RequestError):
    """Raised when a call, request, batch or tool is unknown (or not the caller's to see)."""

    status_code = 404


class Conflict(RequestError):
    """Raised when the current state forbids the action."""

    status_code = 409


class IdempotencyConflict(Conflict):
    """Raised when an idempotency key is reused with a different tool or arguments."""

    def __init__(self) -> None:
        super().__init__("idempotency key reused with different arguments")


class NotCancellable(Conflict):
    """Raised when cancelling a call that is no longer queued or pending."""


class CallLost(ToolrouterError, ConnectionError):
    """Raised when a tool server's connection ended while a call was out to it: the tool
    may have run, so only an idempotent tool's call may be sent again."""


class AnswerTooLarge(ToolrouterError):
    """Raised when a tool server's answer was cut off, unread, past the largest answer read
    (``limit_bytes``): the tool did answer, so it is neither lost nor unreachable."""

    def __init__(self, message: str, *, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


class McpProtocolError(ToolrouterError):
    """Raised when an MCP server sends a message that cannot be read as JSON-RPC (not JSON,
    nested past the parser's limit, a number out of range) while a call waits on it."""


class ToolListRefused(ToolrouterError):
    """An MCP server's tool list that is not taken; its text completes "mcp server 'x' …"."""


class ToolListTooLong(ToolListRefused):
    """Raised when an MCP server's tool list goes on past what is read of it (too many tools,
    pages or bytes, or a cursor it gave before): none of it is kept."""


class ToolListUnreadable(ToolListRefused):
    """Raised when a page of an MCP server's tool list is not a tool list at all (its tools
    not a list, its cursor not a string); a tool the SDK cannot read is only left out."""


class RetryableError(ToolrouterError):
    """Raised by a handler when the failure is transient and the call may be retried."""

    def __init__(self, message: str = "", *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
