"""A notification receiver that misbehaves, met through a real socket: each attempt ends
within ``notify_timeout_s`` in all, and only a webhook's status is read, so a receiver or
mail server answering a little at a time or without end holds neither a worker nor its
memory."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import pytest

from router.notify.content import Notice
from router.notify.model import NotifyEvent
from router.notify.senders import AttemptFailed, _BoundedSMTP, send
from router.tools.notify_config import EmailChannel, WebhookChannel

from ..support.scripted_http import ScriptedServer, Seen
from ..support.waiting import wait_for

NOTICE = Notice(
    event=NotifyEvent.PENDING,
    request_id="req-1",
    call_id="call_1",
    tool="wire",
    requested_by="agent-7",
    approvers=("finance",),
    approvals_required=1,
    args_sha256="0" * 64,
    args_summary='{"to": "bob"}',
    created_at=0,
    expires_at=3_600_000,
    link="http://127.0.0.1/ui/#req-1",
    at=0,
)


async def trickled_head(seen: Seen, writer: Any) -> bool:
    """A status line and headers a byte every 0.2 s: each read is quick, the whole is not."""
    for byte in b"HTTP/1.1 200 OK\r\nx-pad: " + b"y" * 40 + b"\r\ncontent-length: 0\r\n\r\n":
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.2)
    return False


async def endless_body(seen: Seen, writer: Any) -> bool:
    """A 200 that promises ten gigabytes, sends some and never finishes."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10000000000\r\n\r\n")
    for _ in range(64):
        writer.write(b"x" * (1 << 20))
        await writer.drain()
    await asyncio.sleep(30)
    return False


def webhook(url: str) -> WebhookChannel:
    return WebhookChannel(type="webhook", url=f"{url}/hook", secret="s" * 32)


def test_a_receiver_answering_a_byte_at_a_time_is_cut_off_at_the_timeout() -> None:
    with ScriptedServer(trickled_head) as server:
        started = time.monotonic()
        with pytest.raises(AttemptFailed) as failed:
            send(webhook(server.url), NOTICE, timeout_s=1, now_s=0)
        assert time.monotonic() - started < 3
    assert failed.value.reason == "timed out after 1 s"
    assert failed.value.retryable


def test_a_receiver_s_endless_body_is_not_read_once_its_status_is_known() -> None:
    with ScriptedServer(endless_body) as server:
        started = time.monotonic()
        send(webhook(server.url), NOTICE, timeout_s=1, now_s=0)
        assert time.monotonic() - started < 3
        assert len(server.seen) == 1


@contextlib.contextmanager
def mail_server(opening: Callable[[socket.socket, IO[bytes]], None], drip: bytes) -> Iterator[int]:
    """A mail server on loopback that says its ``opening``, then sends ``drip`` every 0.2 s
    (for 6 s, then falls silent); its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn, contextlib.suppress(OSError), conn.makefile("rb") as lines:
            opening(conn, lines)
            for _ in range(30):
                if stop.wait(0.2):
                    return
                conn.sendall(drip)
            stop.wait()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def greeting_line_by_line() -> contextlib.AbstractContextManager[int]:
    """A greeting continued a line at a time."""
    return mail_server(lambda conn, lines: None, b"220-still greeting\r\n")


def handshake_byte_by_byte() -> contextlib.AbstractContextManager[int]:
    """STARTTLS offered, then the TLS handshake's first record a byte at a time."""

    def opening(conn: socket.socket, lines: IO[bytes]) -> None:
        conn.sendall(b"220 mail.example ESMTP\r\n")
        lines.readline()  # EHLO
        conn.sendall(b"250-mail.example\r\n250 STARTTLS\r\n")
        lines.readline()  # STARTTLS
        conn.sendall(b"220 go ahead\r\n")
        conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB follows

    return mail_server(opening, b"\x02")


@pytest.mark.parametrize("server", [greeting_line_by_line, handshake_byte_by_byte])
def test_a_mail_server_answering_a_little_at_a_time_is_cut_off_at_the_timeout(
    server: Callable[[], contextlib.AbstractContextManager[int]],
) -> None:
    with server() as port:
        channel = EmailChannel(
            type="email",
            host="127.0.0.1",
            port=port,
            from_addr="tr@example.com",
            to=("a@x.io",),
            starttls=server is handshake_byte_by_byte,
        )
        started = time.monotonic()
        with pytest.raises(AttemptFailed) as failed:
            send(channel, NOTICE, timeout_s=1, now_s=0)
        assert time.monotonic() - started < 3
    assert failed.value.reason == "timed out after 1 s"
    assert failed.value.retryable


def test_the_deadline_ends_a_tls_handshake_under_way() -> None:
    # The handshake has a deadline of its own, the socket timeout, counted from its start:
    # begun just before the conversation's deadline, it would end a whole timeout late.
    with handshake_byte_by_byte() as port:
        smtp = _BoundedSMTP("127.0.0.1", port, timeout_s=600)
        ended: list[BaseException] = []

        def handshake() -> None:
            try:
                smtp.starttls(context=ssl.create_default_context())
            except BaseException as exc:
                ended.append(exc)

        thread = threading.Thread(target=handshake, daemon=True)
        thread.start()
        # STARTTLS detaches the plain socket as it hands the connection to TLS.
        wait_for(lambda: smtp.sock is not None and smtp.sock.fileno() == -1, 60, "TLS to begin")
        smtp._expire()
        thread.join(30)
        alive = thread.is_alive()
        smtp.close()
    assert not alive, "the handshake went on past the deadline"
    assert ended and isinstance(ended[0], OSError), ended
