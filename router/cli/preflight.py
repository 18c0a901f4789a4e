"""What `toolrouter up` checks before it starts or touches anything: the config, that no
other copy runs on the same state directory, and that its ports are free; and what it (and
`toolrouter api`) warns of: inbox links that are only a guess."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import IO, TYPE_CHECKING

from ..files import private_dir, private_file

if TYPE_CHECKING:
    from ..settings import Settings

LOCK_FILE = "up.lock"


class UpRefused(Exception):
    """`up` cannot start; the message is the one line to show."""


@dataclass
class StateLock:
    """Held while `up` runs: the OS drops it when the process ends, however it ends."""

    handle: IO[str]

    def release(self) -> None:
        self.handle.close()


def hold_state_dir(settings: Settings) -> StateLock:
    """Take the state directory for this `up`, or say which copy already has it."""
    state_dir = settings.state_dir.resolve()
    private_dir(state_dir)
    path = private_file(state_dir / LOCK_FILE)
    handle = path.open("r+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise UpRefused(
            f"toolrouter is already running on {state_dir} (pid {holder}); stop it first, "
            "or give this copy another TOOLROUTER_STATE_DIR"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return StateLock(handle)


def up_holds_state_dir(settings: Settings) -> bool:
    """Whether a running `up` holds the state directory (its lock, not a pid that may have
    been reused)."""
    path = settings.state_dir.resolve() / LOCK_FILE
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


class Server(StrEnum):
    """What `up` serves on a port of its own."""

    API = "the API"
    FLOWER = "Flower"


def check_ports(settings: Settings, servers: tuple[Server, ...] = tuple(Server)) -> None:
    """Each port these ``servers`` listen on must be free now, or nothing starts: Flower
    itself reports a taken one with a traceback."""
    ports = {
        Server.API: ("TOOLROUTER_API_PORT", settings.api_host, settings.api_port),
        Server.FLOWER: ("TOOLROUTER_FLOWER_PORT", settings.flower_host, settings.flower_port),
    }
    wildcard = {"", "0.0.0.0", "::"}
    same_address = settings.api_host == settings.flower_host or bool(
        {settings.api_host, settings.flower_host} & wildcard
    )
    if set(servers) == set(Server) and settings.api_port == settings.flower_port and same_address:
        # Either would start and the other fail to bind, after the rest had started.
        raise UpRefused(
            f"TOOLROUTER_API_PORT and TOOLROUTER_FLOWER_PORT are both {settings.api_port}: "
            "the API and Flower each need a port of their own"
        )
    for server in servers:
        check_port(server, *ports[server])


def check_port(what: str, setting: str, host: str, port: int) -> None:
    if not port_is_free(host, port):
        raise UpRefused(
            f"port {port} on {host} ({what}) is in use, by another toolrouter or another "
            f"program; free it or set {setting}"
        )


def port_is_free(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return True  # the server itself will report a name it cannot bind
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            # As the servers bind: a port left in TIME_WAIT by a stopped copy counts as free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                # Only a taken port counts: an address family this host lacks does not.
                if exc.errno == errno.EADDRINUSE:
                    return False
    return True


def public_url_warning(settings: Settings, notifies: bool, *, on_its_own: bool) -> str | None:
    """The warning for links in notifications that approvers may not reach: built by a
    notification worker ``on_its_own`` (a deployment of its own processes) without
    ``TOOLROUTER_PUBLIC_URL``, or by ``up`` from a bind address of every interface."""
    if settings.public_url or not notifies:
        return None
    if not on_its_own and not settings.public_url_guessed:
        return None
    return (
        f"warning: TOOLROUTER_PUBLIC_URL is unset, so links in notifications read "
        f"{settings.resolved_public_url}/ui/; set it to the address approvers open the "
        "inbox at"
    )
