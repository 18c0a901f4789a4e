"""The process commands refuse a port or a pool they cannot have in one line, before
anything starts: a port past 65535 was bound modulo 65536, a pool of 0 became one per CPU,
and Flower on a taken port ended in a traceback."""

from __future__ import annotations

import socket
from pathlib import Path

from ..support.launcher import free_port
from .test_cli import Home


def test_an_api_port_out_of_range_is_refused_on_the_command_line_and_in_settings(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    refused = home.run("api", "--port", "99999")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Invalid value for '--port': 99999 is not in the range 1<=x<=65535" in refused.stderr
    negative = Home(tmp_path / "b", TOOLROUTER_API_PORT="-5").run("keys", "list")
    assert negative.returncode == 2, negative.stdout + negative.stderr
    assert "TOOLROUTER_API_PORT" in negative.stderr and "Traceback" not in negative.stderr


def test_a_worker_pool_of_none_is_refused(tmp_path: Path) -> None:
    for wanted in ("0", "-1"):
        refused = Home(tmp_path / wanted).run("worker", "--risk", "low", "--concurrency", wanted)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "Invalid value for '--concurrency'" in refused.stderr
        assert "celery" not in refused.stderr.lower()


def test_flower_on_a_taken_port_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        home = Home(tmp_path, TOOLROUTER_FLOWER_PORT=str(port), TOOLROUTER_FLOWER_PASSWORD="pw")
        refused = home.run("flower")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr == (
        f"error: port {port} on 127.0.0.1 (Flower) is in use, by another toolrouter or "
        "another program; free it or set TOOLROUTER_FLOWER_PORT\n"
    )


def test_up_with_the_api_and_flower_on_one_port_is_one_line(tmp_path: Path) -> None:
    port = str(free_port())
    home = Home(tmp_path, TOOLROUTER_API_PORT=port, TOOLROUTER_FLOWER_PORT=port)
    refused = home.run("up")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr == (
        f"error: TOOLROUTER_API_PORT and TOOLROUTER_FLOWER_PORT are both {port}: the API and "
        "Flower each need a port of their own\n"
    )
