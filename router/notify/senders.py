"""Sending one notification on one channel, once. A failure is an ``AttemptFailed``
saying whether a later attempt may succeed; its reason names what went wrong (a status,
a timeout, an SMTP code) and never a URL, an address's password or a secret."""

from __future__ import annotations

import asyncio
import contextlib
import smtplib
import socket
import ssl
import threading
from typing import TYPE_CHECKING

import httpx

from ..tools.notify_config import EmailChannel, SlackChannel, WebhookChannel
from .content import Notice, email_message, slack_body, webhook_body
from .digest import Digest, email_digest, slack_digest
from .signing import SIGNATURE_HEADER, header_value

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

USER_AGENT = "toolrouter-notify"


class AttemptFailed(Exception):
    """Raised when one attempt did not deliver; ``retryable``: a later one may."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason, self.retryable = reason, retryable


def send(
    channel: WebhookChannel | SlackChannel | EmailChannel,
    notice: Notice | Digest,
    *,
    timeout_s: float,
    now_s: int,
) -> None:
    """Send ``notice`` on ``channel``: a ``Digest`` only on channels people read."""
    if isinstance(channel, WebhookChannel):
        if isinstance(notice, Digest):
            raise AttemptFailed("a webhook takes one request at a time", retryable=False)
        body = webhook_body(notice)
        signed = header_value(channel.secret, now_s, body)
        _post(channel.url, body, {SIGNATURE_HEADER: signed}, timeout_s)
    elif isinstance(channel, SlackChannel):
        body = slack_digest(notice) if isinstance(notice, Digest) else slack_body(notice)
        _post(channel.url, body, {}, timeout_s)
    else:
        _mail(channel, notice, timeout_s)


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> None:
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    try:
        status = asyncio.run(_status_of(url, body, headers, timeout_s))
    except (TimeoutError, httpx.TimeoutException):
        raise AttemptFailed(f"timed out after {timeout_s:g} s", retryable=True) from None
    except httpx.TransportError as exc:
        # The exception's text may carry the URL (a Slack URL is a credential): its kind only.
        raise AttemptFailed(f"connection failed ({type(exc).__name__})", retryable=True) from None
    except (httpx.InvalidURL, UnicodeError):  # UnicodeError: an invalid international name
        raise AttemptFailed("the URL is not one a request can go to", retryable=False) from None
    if 200 <= status < 300:
        return
    retryable = status >= 500 or status in (408, 429)
    raise AttemptFailed(f"HTTP {status}", retryable=retryable)


async def _status_of(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """The receiver's status, within ``timeout_s`` in all: httpx's own timeout is per read,
    so a receiver answering a byte at a time would hold the worker without end."""
    async with (
        asyncio.timeout(timeout_s),
        httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client,
        # Streamed and left unread: only the status counts, and a body could be endless.
        client.stream("POST", url, content=body, headers=headers) as response,
    ):
        return response.status_code


def _mail(channel: EmailChannel, notice: Notice | Digest, timeout_s: float) -> None:
    sender, to = channel.from_addr, channel.to
    try:
        if isinstance(notice, Digest):
            message = email_digest(notice, sender=sender, to=to)
        else:
            message = email_message(notice, sender=sender, to=to)
    except ValueError:  # an address that is none; the config's check refuses those first
        raise AttemptFailed("the message's addresses are not addresses", retryable=False) from None
    try:
        with _BoundedSMTP(channel.host, channel.port, timeout_s) as smtp:
            if channel.starttls:
                smtp.starttls(context=ssl.create_default_context())
                smtp.check()
            if channel.username is not None:
                smtp.login(channel.username, channel.password or "")
            smtp.send_message(message)
    except _Expired:
        raise AttemptFailed(f"timed out after {timeout_s:g} s", retryable=True) from None
    except smtplib.SMTPResponseException as exc:
        # 4xx: the server asks to try later; 5xx: it refuses for good.
        raise AttemptFailed(f"SMTP {exc.smtp_code}", retryable=400 <= exc.smtp_code < 500) from None
    except smtplib.SMTPRecipientsRefused:
        raise AttemptFailed("SMTP refused every recipient", retryable=False) from None
    except TimeoutError:
        raise AttemptFailed(f"timed out after {timeout_s:g} s", retryable=True) from None
    except (OSError, smtplib.SMTPException) as exc:
        raise AttemptFailed(f"SMTP failed ({type(exc).__name__})", retryable=True) from None


class _Expired(Exception):
    """Raised when an SMTP conversation outlived its deadline."""


class _BoundedSMTP(smtplib.SMTP):
    """``smtplib.SMTP`` whose whole conversation ends ``timeout_s`` after it began:
    smtplib's timeout is per read, so a server answering a line at a time would hold the
    worker without end. At the deadline its socket is shut, which ends any read."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.expired = False
        # The connection's descriptor: STARTTLS moves it from ``sock`` to a TLS socket
        # (detaching the first) while a handshake, which can be trickled too, is under way.
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout_s, self._expire)
        self._timer.daemon = True
        self._timer.start()
        try:
            super().__init__(host, port, timeout=timeout_s)
        except BaseException:
            self.close()
            raise

    # smtplib's hook for making the connection (absent from its stubs).
    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock: socket.socket = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        with self._lock:  # connected after the deadline: ``check`` meets it before a read
            self._fd = sock.fileno()
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    shared = socket.socket(fileno=self._fd)
                    try:
                        shared.shutdown(socket.SHUT_RDWR)
                    finally:
                        shared.detach()  # the descriptor stays the connection's to close

    def check(self) -> None:
        """Raise ``_Expired`` once the deadline has passed."""
        if self.expired:
            raise _Expired

    def getreply(self) -> tuple[int, bytes]:
        self.check()
        try:
            return super().getreply()
        except smtplib.SMTPServerDisconnected:
            self.check()
            raise

    def send(self, s: ReadableBuffer | str) -> None:
        self.check()
        try:
            super().send(s)
        except smtplib.SMTPServerDisconnected:
            self.check()
            raise

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:  # a closed descriptor's number may be reused: never shut it then
            self._fd = None
        super().close()
