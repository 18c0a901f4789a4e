"""Request-scoped helpers: the runtime, the caller's key, running blocking work off the loop."""

from __future__ import annotations

from fastapi import Request

from ..auth.bearer import bearer_token
from ..auth.principal import Principal
from ..errors import Forbidden
from ..runtime import Runtime
from ..threads import in_thread

__all__ = ["in_thread", "principal", "require_operator", "runtime_of"]


def runtime_of(request: Request) -> Runtime:
    return request.app.state.runtime


async def principal(request: Request) -> Principal:
    """The authenticated caller (a FastAPI dependency); 401 when there is none."""
    keys = runtime_of(request).keys
    token = bearer_token(request.headers)
    # A key this process knows needs no thread and no database (router.auth.key_cache).
    known = keys.cached(token)
    return known if known is not None else await in_thread(keys.authenticate, token)


def require_operator(who: Principal) -> None:
    if not who.is_operator:
        raise Forbidden("operator role required")
