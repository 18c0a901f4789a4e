"""Receivers of notifications on loopback, for the notification tests: scripts for
``ScriptedServer`` that accept, refuse or fail a few times first, and an aiosmtpd handler
that keeps what it is sent and the logins it was given."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import threading
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.smtp import AuthResult, LoginPassword

from .scripted_http import Seen, answer


def request_id_of(seen: Seen) -> str | None:
    """The request a post is about: a webhook's ``request_id``, else the id in a Slack
    message's inbox link."""
    try:
        body = seen.json()
    except ValueError:
        return None
    if "request_id" in body:
        return str(body["request_id"])
    found = [part for part in json.dumps(body).split("#") if part.startswith("req-")]
    return found[0][:36] if found else None


class FlakyScript:
    """503 to the first ``failures`` posts about each request, then 200."""

    def __init__(self, failures: int) -> None:
        self.failures, self.seen_by_request = failures, dict[str, int]()

    async def __call__(self, seen: Seen, writer: Any) -> bool:
        request_id = request_id_of(seen) or ""
        count = self.seen_by_request[request_id] = self.seen_by_request.get(request_id, 0) + 1
        writer.write(answer(503 if count <= self.failures else 200, {"ok": count > self.failures}))
        return True


class HangingScript:
    """503 to the first ``failures`` posts about each request (a retry follows each), then
    holds every later post unanswered until ``release()``; ``held``: the posts held."""

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.seen_by_request = failures, dict[str, int]()
        self.held: list[Seen] = []
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()

    def failed(self) -> int:
        """How many requests have had all their failing answers."""
        return sum(count >= self.failures for count in self.seen_by_request.values())

    async def __call__(self, seen: Seen, writer: Any) -> bool:
        request_id = request_id_of(seen) or ""
        count = self.seen_by_request[request_id] = self.seen_by_request.get(request_id, 0) + 1
        if count <= self.failures:
            writer.write(answer(503, {"ok": False}))
            return True
        self.held.append(seen)
        # Polled, not awaited in an executor thread: its few threads would cap the posts held.
        while not self.released.is_set():
            await asyncio.sleep(0.1)
        return False


class HeldScript:
    """Holds each post announcing ``event`` until ``release()``, then answers 503 to it (a
    receiver that was down while the request was decided); 200 to every other post."""

    def __init__(self, event: str) -> None:
        self.event, self.released = event, threading.Event()

    def release(self) -> None:
        self.released.set()

    async def __call__(self, seen: Seen, writer: Any) -> bool:
        held = _event_of(seen) == self.event
        if held:
            await asyncio.get_running_loop().run_in_executor(None, self.released.wait, 60)
        writer.write(answer(503 if held else 200, {"ok": not held}))
        return True


def _event_of(seen: Seen) -> str | None:
    try:
        return str(seen.json().get("event"))
    except (ValueError, AttributeError):
        return None


async def accept(seen: Seen, writer: Any) -> bool:
    writer.write(answer(200, {"ok": True}))
    return True


async def refuse(seen: Seen, writer: Any) -> bool:
    writer.write(answer(500, {"ok": False}))
    return True


@dataclass
class Mailbox:
    """What the SMTP server received, and the logins it was given."""

    # The only password it takes.
    password: str
    messages: list[EmailMessage] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        return "250 OK"

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=data.password.decode() == self.password)
