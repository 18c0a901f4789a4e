"""Connections to the MCP servers in the config: one session per server per process.

The SDK is asynchronous and Celery's pool processes are not, so each process runs one
event loop in a background thread. Each server's session is owned by one long-lived task
on that loop (the SDK's context managers must be entered and left by the same task);
calls from the worker thread are handed to the loop and waited on with a timeout. A
session that drops is opened again on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import shutil
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from pydantic import ValidationError

from ..errors import (
    AnswerTooLarge,
    CallLost,
    McpProtocolError,
    ToolListRefused,
    ToolListTooLong,
)
from ..files import private_dir
from ..trust.redaction import Redactor
from .mcp_servers import HttpServer, ServerSpec, StdioServer, parse_servers
from .mcp_stderr import rotated, stderr_log, written_since
from .mcp_stdio_lines import held_lines
from .mcp_tool_list import ToolListing, every_tool
from .mcp_unreachable import EXIT_MARK, unreachable_reason
from .mcp_unreadable import not_an_mcp_result, refused_reason, unreadable_reason, watch_unreadable

__all__ = ["HttpServer", "McpConnections", "ServerSpec", "StdioServer", "parse_servers"]

log = logging.getLogger(__name__)
T = TypeVar("T")
CONNECT_TIMEOUT_S = 30.0
# An answer may carry its value twice (text and structured), JSON-escaped: it is read up to
# this many times the largest result.
ANSWER_BYTES_PER_RESULT_BYTE = 4
# A server whose stderr goes to its log runs under ``sh``, which reports a non-zero exit
# status there (``EXIT_MARK``); sh and server share one process group, so stopping the
# server stops both. Once the server has exited, sh ends what it left running in the
# group: the SDK kills the group only of a server that outstays its stdin closing.
_REPORT_EXIT = (
    '"$0" "$@"; code=$?; trap "" TERM; kill -TERM 0 2>/dev/null; '
    f'[ "$code" -eq 0 ] || echo "{EXIT_MARK}$code" >&2; exit $code'
)


@dataclass(eq=False)
class _Session:
    # Its client once connected; every caller waits for it here.
    ready: asyncio.Future[Any]
    stop: asyncio.Event
    done: asyncio.Event
    task: asyncio.Task[None] | None = None
    # One per call out: told of a message the transport could not read.
    unreadable: set[asyncio.Future[Exception]] = field(default_factory=set)
    # Set when an answer was cut off at ``max_answer_bytes``: the session is done for.
    cut: bool = False
    # Set once its tool list is read, which the SDK needs to check a call's result.
    listed: bool = False

    def cut_off(self) -> None:
        """Told, on the session's loop, that an answer was cut off: the calls out fail, and
        the session ends (its stdio reader has stopped reading)."""
        self.cut = True
        for waiting in self.unreadable:
            if not waiting.done():
                waiting.set_result(EOFError("answer cut off"))
        self.stop.set()


@dataclass
class McpConnections:
    """The sessions of one process, keyed by server name."""

    servers: dict[str, ServerSpec]
    # Where each stdio server's stderr goes (``mcp-<name>.log``), never into command output.
    log_dir: Path | None = None
    # The largest answer read from a server: over HTTP (``mcp_http``), or a line of a stdio
    # server's output (``mcp_stdio_lines``).
    max_answer_bytes: int = 64 * 1024 * 1024
    # Applied to each line a server writes to its stderr: its env may hold ${VAR} secrets.
    redact: Redactor = field(default_factory=Redactor)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _sessions: dict[str, _Session] = field(default_factory=dict)
    # Sessions told to stop and not yet ended (on the loop): ``close`` waits for them too.
    _ending: set[_Session] = field(default_factory=set)
    # Per server: its stderr log and where the latest start of it began writing.
    _stderr_from: dict[str, tuple[Path, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the loop -------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="mcp-client", daemon=True
                )
                self._thread.start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(Exception):
            self._run(self._close_all(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()
        self._loop = None

    async def _close_all(self) -> None:
        # All at once: a server that outlives the end of its input takes the SDK seconds
        # to stop, and one after another they would run past ``close``'s wait.
        sessions = list(self._sessions.values())
        for session in sessions:
            self._stop(session)
        for session in [*sessions, *self._ending]:
            await session.done.wait()
        self._sessions.clear()

    # -- sessions -------------------------------------------------------------------------

    async def _session(self, name: str) -> _Session:
        """The server's session, connected: the one there is, else a new one."""
        session = self._sessions.get(name)
        if session is None or session.done.is_set():
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            # Read, so a failure no caller waited for is not reported as never retrieved.
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            session = _Session(ready=ready, stop=asyncio.Event(), done=asyncio.Event())
            session.task = asyncio.create_task(self._own(name, session))
            # Also when the task is cancelled before its first step, where ``_own`` never runs.
            session.task.add_done_callback(lambda _: self._ended(session))
            self._sessions[name] = session
        if not session.ready.done():
            try:
                # Shielded: a caller given up on (its time limit) leaves the connect under
                # way to the next caller, rather than a session that never gets its client.
                await asyncio.wait_for(asyncio.shield(session.ready), CONNECT_TIMEOUT_S)
            except TimeoutError:
                if not session.ready.done():
                    # A server that never answers its start: stopped, its process with it.
                    if self._sessions.get(name) is session:
                        del self._sessions[name]
                    self._stop(session)
                    raise
        session.ready.result()  # the connect's failure, if it failed
        return session

    async def _own(self, name: str, session: _Session) -> None:
        """Enter the client, hand it out, and leave it in this same task on stop."""
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        spec = self.servers[name]
        try:
            async with contextlib.AsyncExitStack() as files:
                if isinstance(spec, StdioServer):
                    command, args = spec.command, list(spec.args)
                    if self.log_dir is not None and os.name == "posix":
                        command, args = "/bin/sh", ["-c", _REPORT_EXIT, _found(spec), *args]
                    params = StdioServerParameters(
                        command=command,
                        args=args,
                        env=spec.env,
                        cwd=spec.cwd,
                        # Strict, one byte that is not UTF-8 stops the SDK's reader for
                        # good, and every later call of the session waits out its timeout.
                        encoding_error_handler="replace",
                    )
                    errlog = await files.enter_async_context(self._errlog(name))
                    # A server that exits ends its session at once: the next call starts it
                    # again rather than being sent on a dead session and counted as lost.
                    ended = session.stop.set
                    files.enter_context(held_lines(self.max_answer_bytes, session.cut_off, ended))
                    target: Any = stdio_client(params, errlog=errlog)
                else:
                    from mcp.client.streamable_http import streamable_http_client

                    from .mcp_http import http_client

                    # Given a client, the SDK leaves closing it to us.
                    http = http_client(spec.headers, self.max_answer_bytes, session.cut_off)
                    await files.enter_async_context(http)
                    target = streamable_http_client(spec.url, http_client=http)
                async with Client(
                    target, message_handler=watch_unreadable(session.unreadable)
                ) as client:
                    if not session.ready.done():
                        session.ready.set_result(client)
                    await session.stop.wait()
        except BaseException as exc:
            if not session.ready.done():
                failed = exc if isinstance(exc, Exception) else ConnectionError("not connected")
                session.ready.set_exception(failed)
            else:
                log.warning("MCP server %s: session ended: %s", name, exc)
        finally:
            session.done.set()

    def _errlog(self, name: str) -> contextlib.AbstractAsyncContextManager[TextIO]:
        """A file for the server's stderr, copied to its log (``mcp_stderr``), or without a
        log folder to this process's file descriptor 2 (under Celery, ``sys.stderr`` is a
        logging proxy without one), escaped either way."""
        if self.log_dir is None:
            return stderr_log(None, self.redact)
        # A server's name is the config's: only safe characters reach the file name.
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "server"
        path = rotated(private_dir(self.log_dir) / f"mcp-{safe}.log")
        self._stderr_from[name] = (path, path.stat().st_size)
        return stderr_log(path, self.redact)

    def why_unreachable(self, name: str, exc: BaseException) -> str:
        """The cause of a failed start, in words, with what the server wrote to its stderr
        this time."""
        found = self._stderr_from.get(name)
        if found is None:
            return unreachable_reason(exc, [])
        return unreachable_reason(exc, written_since(*found), log=found[0])

    def _drop(self, name: str) -> _Session | None:
        session = self._sessions.pop(name, None)
        if session is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop, session)
        return session

    def _stop(self, session: _Session) -> None:
        """End ``session``, on its loop: one still starting is cancelled, since the SDK looks
        at nothing of ours until its server has answered, and leaving stops the server."""
        session.stop.set()
        if not session.done.is_set():
            self._ending.add(session)
        if not session.ready.done() and session.task is not None:
            session.task.cancel()

    def _ended(self, session: _Session) -> None:
        """The session's task is over, whatever ended it: its callers are told."""
        if not session.ready.done():
            session.ready.set_exception(ConnectionError("not connected"))
        session.done.set()
        self._ending.discard(session)

    # -- what callers use -----------------------------------------------------------------

    def list_tools(self, name: str) -> ToolListing:
        """Every tool the server offers (all pages); raises on a server that cannot start."""

        async def fetch() -> ToolListing:
            session = await self._session(name)
            listing = await every_tool(session.ready.result())
            session.listed = True
            return listing

        try:
            return self._run(fetch(), timeout=CONNECT_TIMEOUT_S + 10)
        except Exception:
            session = self._sessions.get(name)
            if session is not None and session.cut:
                # The reader stopped at the limit: the server answered, at too great a length.
                self._drop(name)
                raise ToolListTooLong(
                    f"sends its tool list in a message over {self.max_answer_bytes} bytes"
                    f" ({ANSWER_BYTES_PER_RESULT_BYTE} x TOOLROUTER_MAX_RESULT_BYTES)"
                ) from None
            raise

    def call_tool(self, name: str, tool: str, args: dict[str, Any], timeout: float) -> Any:
        """One ``tools/call``. A session that cannot be opened raises ``ConnectionError``;
        one that drops once the call is out raises ``CallLost`` (the tool may have run)."""
        sent = False

        async def call() -> Any:
            nonlocal sent
            try:
                session = await self._session(name)
            except TimeoutError:
                raise ConnectionError(f"no session within {CONNECT_TIMEOUT_S:g} s") from None
            client = session.ready.result()
            if not session.listed:
                # Read as toolrouter reads it: the SDK would list the tools itself on the
                # first result, and fail on a tool in the list that it cannot read.
                try:
                    await every_tool(client)
                except ToolListRefused as exc:
                    raise ConnectionError(f"MCP server {name} {exc}") from None
                session.listed = True
            sent = True
            request = client.call_tool(tool, args, read_timeout_seconds=timeout)
            try:
                return await self._answer(name, session, request)
            except ValidationError as exc:
                raise not_an_mcp_result(name, exc) from None

        try:
            return self._run(call(), timeout=timeout + CONNECT_TIMEOUT_S)
        except AnswerTooLarge:
            self._drop(name)
            raise
        except (ConnectionError, OSError, EOFError) as exc:
            _raise_if_cut(name, self._drop(name), self.max_answer_bytes)
            raise (CallLost if sent else ConnectionError)(f"MCP server {name}: {exc}") from None
        except Exception as exc:
            if self._lost(name, exc):
                # The next call opens a fresh session; this one fails rather than being sent
                # again on it, since it may have reached the server.
                _raise_if_cut(name, self._drop(name), self.max_answer_bytes)
                lost = CallLost if sent else ConnectionError
                raise lost(f"MCP server {name}: connection lost ({exc})") from None
            raise

    async def _answer(self, name: str, session: _Session, request: Coroutine[Any, Any, T]) -> T:
        """``request``'s answer; fails at once when the server sends what cannot be read,
        rather than waiting out the timeout for an answer that may have been it."""
        unreadable: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        session.unreadable.add(unreadable)
        answer = asyncio.ensure_future(request)
        try:
            first: set[asyncio.Future[Any]] = {answer, unreadable}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                return _read_answer(name, answer)
            _raise_if_cut(name, session, self.max_answer_bytes)
            reason = unreadable_reason(unreadable.result())
            raise McpProtocolError(
                f"MCP server {name} sent a message that is not JSON-RPC: {reason}"
            )
        finally:
            answer.cancel()
            session.unreadable.discard(unreadable)

    def _lost(self, name: str, exc: Exception) -> bool:
        session = self._sessions.get(name)
        if session is not None and session.done.is_set():
            return True
        return type(exc).__name__ in {
            "ClosedResourceError",
            "BrokenResourceError",
            "EndOfStream",
        } or "Connection closed" in str(exc)


def _read_answer(name: str, answer: asyncio.Future[T]) -> T:
    """The answer's result; the SDK's error for an answer over HTTP that is not JSON-RPC is
    raised as such, in one line, rather than as pydantic's report quoting the answer."""
    from mcp import MCPError
    from mcp.types import PARSE_ERROR

    try:
        return answer.result()
    except MCPError as exc:
        reason = refused_reason(exc.message) if exc.code == PARSE_ERROR else None
        if reason is None:
            raise
        raise McpProtocolError(
            f"MCP server {name} sent a message that is not JSON-RPC: {reason}"
        ) from None


def _raise_if_cut(name: str, session: _Session | None, limit_bytes: int) -> None:
    """A session lost because an answer was cut off at the limit: the call fails for its
    answer's size, not for the connection."""
    if session is not None and session.cut:
        raise AnswerTooLarge(
            f"MCP server {name}: answer larger than {limit_bytes} bytes", limit_bytes=limit_bytes
        )


def _found(spec: StdioServer) -> str:
    """The command, checked the way the SDK would find it (so that a missing one is named
    as such rather than as sh's exit code)."""
    if "/" in spec.command and not os.path.isabs(spec.command):
        return spec.command  # relative to the server's cwd: sh reports it if missing
    # The server's own PATH if its env sets one, else this process's (which() reads it).
    if shutil.which(spec.command, path=(spec.env or {}).get("PATH")) is None:
        raise FileNotFoundError(errno.ENOENT, "command not found", spec.command)
    return spec.command
