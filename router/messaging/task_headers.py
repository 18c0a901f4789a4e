"""What the headers of a Celery task message from Redis must be before a worker reads them.

Celery trusts its broker: it reads a task message's headers (protocol 2) as its own
publish wrote them, and some are used long after the message was taken, where nothing
catches what a wrong type raises (a time limit that is text ends the worker at the pool's
acknowledgement). Redis is not trusted, so a worker's channel checks each header Celery
reads against the type Celery writes (``celery.app.amqp.as_task_v2``) and drops a message
that differs (``router.messaging.redis_transport``). Celery also reads the older forms,
whose headers are in a body that is a JSON object (``celery.worker.strategy``), so those
are checked there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from kombu.utils.json import loads


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _optional_count(value: Any) -> bool:
    return value is None or _count(value)


def _optional_flag(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _seconds(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def _time_limits(value: Any) -> bool:
    """``[soft, hard]``, each seconds or None."""
    return value is None or (
        isinstance(value, list | tuple) and len(value) == 2 and all(map(_seconds, value))
    )


def _texts(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(map(_text, value)))


def _mapping(value: Any) -> bool:
    return value is None or isinstance(value, dict)


# Every header Celery reads, with the type its own publish gives it.
_HEADERS: dict[str, Callable[[Any], bool]] = {
    "lang": _optional_text,
    "task": _text,
    "id": _text,
    "shadow": _optional_text,
    "eta": _optional_text,
    "expires": _optional_text,
    "group": _optional_text,
    "group_index": _optional_count,
    "retries": _optional_count,
    "timelimit": _time_limits,
    "root_id": _optional_text,
    "parent_id": _optional_text,
    "argsrepr": _optional_text,
    "kwargsrepr": _optional_text,
    "origin": _optional_text,
    "ignore_result": _optional_flag,
    "replaced_task_nesting": _optional_count,
    "stamped_headers": _texts,
    "stamps": _mapping,
}
# Celery cannot run a task message without these.
_REQUIRED = ("task", "id")


def read_headers(headers: Any, body: Any, content_type: str | None) -> Any:
    """The headers Celery reads of a message: its own, over those of a body that is a JSON
    object (a hybrid of protocols 1 and 2 has both; protocol 1 has the body's only)."""
    fields = _json_object(body) if content_type == "application/json" else None
    if fields is None or not isinstance(headers, Mapping):
        return headers
    return {**fields, **headers}


def _json_object(body: Any) -> dict[str, Any] | None:
    """``body`` read as kombu reads it, if it is a JSON object; a protocol 2 body (a list)
    is not read at all, and neither is one Celery will refuse by itself."""
    if not isinstance(body, bytes | str) or body.lstrip()[:1] not in (b"{", "{"):
        return None
    try:
        fields = loads(body)
    except (ValueError, RecursionError):
        return None
    return fields if isinstance(fields, dict) else None


def header_problem(headers: Any) -> str | None:
    """Why a task message with ``headers`` must not reach Celery; None if it may. Headers
    that name no task are left to Celery, which refuses them by itself (remote control's
    messages have none)."""
    if not isinstance(headers, Mapping) or "task" not in headers:
        return None
    for name in _REQUIRED:
        if name not in headers:
            return f"no {name} header"
    for name, valid in _HEADERS.items():
        if name in headers and not valid(headers[name]):
            return f"header {name} is {type(headers[name]).__name__}"
    return None
