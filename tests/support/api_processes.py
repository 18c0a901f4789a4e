"""Which of an API's processes (``TOOLROUTER_API_PROCESSES``) serves a connection, so a
test can send a request to a chosen process rather than leave it to the kernel."""

from __future__ import annotations

import httpx
import psutil

from .stack import Stack


def serving_processes(stack: Stack) -> list[psutil.Process]:
    """The API's serving processes: uvicorn's workers under the process it was started as."""
    parent = psutil.Process(stack.processes["api"].pid)
    return [p for p in parent.children() if "spawn_main" in " ".join(p.cmdline())]


def client_port(response: httpx.Response) -> int:
    """The local port of the connection ``response`` came over."""
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def serving_pid(stack: Stack, port: int) -> int | None:
    """The serving process holding the connection from the test's ``port``, if any."""
    for process in serving_processes(stack):
        try:
            connections = process.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.raddr and c.raddr.port == port for c in connections):
            return process.pid
    return None
