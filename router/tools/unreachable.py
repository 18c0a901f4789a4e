"""A tool server that does not answer, reported as one log line of a fixed form: workers
log it, and `toolrouter up` shows it on the terminal."""

from __future__ import annotations

import logging

log = logging.getLogger("toolrouter.tools")

MARK = "tool server unreachable:"


def report(server: str, reason: str) -> None:
    log.warning("%s %s (%s)", MARK, server, reason)
