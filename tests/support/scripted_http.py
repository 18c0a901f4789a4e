"""A scripted HTTP/1.1 server on loopback, for what a real API rarely does on cue: answers
cut short, closed connections, slow or streamed answers, a proxy, TLS. It runs its own
event loop in a thread, so blocking and asyncio clients alike talk to it; and
``Driven`` drives ``Client`` and ``AsyncClient`` the same way, so each test runs with both.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router import AsyncClient, Client


@dataclass(frozen=True)
class Seen:
    """One request as the server read it (header names lowercased)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# Answers one request on the writer; returns whether the connection stays open.
Script = Callable[[Seen, asyncio.StreamWriter], Awaitable[bool]]


def answer(status: int, body: Any, *extra: str) -> bytes:
    """A whole response with a JSON body (and ``extra`` header lines)."""
    data = json.dumps(body).encode()
    head = [
        f"HTTP/1.1 {status} X",
        "content-type: application/json",
        f"content-length: {len(data)}",
    ]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + data


def echo_result(seen: Seen) -> bytes:
    """A call's ``succeeded`` answer whose value is the arguments it was sent."""
    args = seen.json()["args"] if seen.body else None
    return answer(200, {"status": "succeeded", "tool": "echo", "call_id": "call_1", "value": args})


async def echo(seen: Seen, writer: asyncio.StreamWriter) -> bool:
    writer.write(echo_result(seen))
    return True


def echo_after(seconds: float) -> Script:
    """``echo``, each answer ``seconds`` late."""

    async def late_echo(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(seconds)
        return await echo(seen, writer)

    return late_echo


def echo_together(count: int, patience_s: float = 10.0) -> Script:
    """``echo``, every answer held until ``count`` requests have come in (or ``patience_s``
    has passed): only a client with that many requests in flight at once is answered at
    once."""
    arrived = 0
    gathered = asyncio.Event()

    async def together(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        nonlocal arrived
        arrived += 1
        if arrived >= count:
            gathered.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gathered.wait(), patience_s)
        return await echo(seen, writer)

    return together


class ScriptedServer:
    """``script`` answers every request; the server counts connections as it goes."""

    def __init__(self, script: Script = echo, ssl: Any = None) -> None:
        self.script, self.ssl = script, ssl
        self.seen: list[Seen] = []
        self.connections = self.open_now = self.most_open = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def __enter__(self) -> ScriptedServer:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._server = self.run(asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl))
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.ssl else 'http'}://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            self._server.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def run(self, work: Coroutine[Any, Any, Any]) -> Any:
        """``work`` run on the server's loop, from any thread."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while (seen := await _read_request(reader)) is not None:
                self.seen.append(seen)
                keep = await self.script(seen, writer)
                await writer.drain()
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went, or the server stops (a cancelled task would be logged)
        finally:
            self.open_now -= 1
            self._tasks.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Seen | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    line, *fields = head.decode("latin-1").split("\r\n")[:-2]
    method, target, _ = line.split(" ")
    headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return Seen(method, target, headers, body)


class Driven:
    """``Client`` (``flavour="sync"``) or ``AsyncClient``, driven from blocking code."""

    def __init__(self, flavour: str, url: str, key: str = "key") -> None:
        self.flavour = flavour
        self._runner = asyncio.Runner()
        self.client = Client(url, key) if flavour == "sync" else AsyncClient(url, key)

    def __enter__(self) -> Driven:
        return self

    def __exit__(self, *_: object) -> None:
        if isinstance(self.client, AsyncClient):
            self._runner.run(self.client.aclose())
        else:
            self.client.close()
        self._runner.close()

    def __getattr__(self, method: str) -> Callable[..., Any]:
        """``client.<method>``, its answer awaited for ``AsyncClient``."""

        def run(*args: Any, **kw: Any) -> Any:
            got = getattr(self.client, method)(*args, **kw)
            return self._runner.run(got) if self.flavour == "async" else got

        return run

    def pause(self, seconds: float) -> None:
        """Let time pass, with ``AsyncClient``'s event loop running (as an application's
        would), so it sees what the server did meanwhile."""
        if self.flavour == "async":
            self._runner.run(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    def at_once(self, method: str, argss: list[tuple[Any, ...]]) -> list[Any]:
        """``client.<method>(*args)`` for each of ``argss``, all in flight at once: from as
        many threads for ``Client``, as many tasks for ``AsyncClient``."""
        if isinstance(self.client, Client):
            do = getattr(self.client, method)
            with ThreadPoolExecutor(len(argss)) as pool:
                return list(pool.map(lambda args: do(*args), argss))

        async def gathered() -> list[Any]:
            do = getattr(self.client, method)
            return list(await asyncio.gather(*(do(*args) for args in argss)))

        return self._runner.run(gathered())

    def first_and_rest(self, batch_id: str, after_first: Callable[[], None]) -> list[Any]:
        """``batch_results``, with ``after_first()`` run once the first item came out."""
        if isinstance(self.client, Client):
            items = self.client.batch_results(batch_id)
            first = next(items)
            after_first()
            return [first, *items]
        stream = self.client.batch_results(batch_id)

        async def rest() -> list[Any]:
            return [item async for item in stream]

        first = self._runner.run(anext(stream))
        after_first()
        return [first, *self._runner.run(rest())]


def tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A CA of the test's own and a certificate it signed for 127.0.0.1: their PEM files
    ``(ca, certificate, key)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(name: str, key: Any, issuer: x509.Name, signer: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolrouter test CA")])
    ca = certificate("toolrouter test CA", ca_key, ca_name, ca_key, True)
    leaf = certificate("127.0.0.1", leaf_key, ca_name, ca_key, False)
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths
