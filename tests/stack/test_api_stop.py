"""An API process stopping while a request waits for a call's outcome: uvicorn gives the
wait its graceful stop, then cancels it; the caller gets an answer, never a 500."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from router.cli import processes

from ..support.launcher import REPO, free_port, stop_group, wait_for_http
from ..support.stack import Stack
from ..support.trust import call_rows_by
from ..support.waiting import wait_for
from .test_api_calls import temporary_key


def start_api(stack: Stack, port: int, log: Path) -> subprocess.Popen[bytes]:
    """An API process of the stack's deployment on ``port``, in a session of its own."""
    with log.open("wb") as handle:
        return subprocess.Popen(
            processes.api_argv(stack.settings, port=port),
            env=stack.env,
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_a_submission_waiting_when_the_api_stops_is_answered_503(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = temporary_key(stack, ["agent"])
    release = tmp_path / "release"
    port, log = free_port(), tmp_path / "api.log"
    api = start_api(stack, port, log)
    answers: list[httpx.Response] = []
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base_url}/healthz", api, log.read_text(errors="replace"))
        body = {"tool": "hold", "args": {"until": str(release)}, "wait_s": 120}

        def submit() -> None:
            with httpx.Client(base_url=base_url, timeout=180) as http:
                headers = {"Authorization": f"Bearer {token}"}
                answers.append(http.post("/v1/calls", json=body, headers=headers))

        waiting = threading.Thread(target=submit, daemon=True)
        waiting.start()
        # Stored: the request is past its submission, in its wait.
        wait_for(lambda: call_rows_by(stack, name) == 1, 60, "the call stored")
        stop_group(api, signal.SIGTERM, timeout=60)
        waiting.join(60)
    finally:
        release.touch()
        stop_group(api)
    (answer,) = answers
    # Not told as accepted: the commit of a waited call may not be on disk yet.
    assert answer.status_code == 503, answer.text
    assert answer.json() == {"ok": False, "error": "unavailable: the API is shutting down"}
    assert "Traceback" not in log.read_text(errors="replace")


def test_an_api_whose_port_is_taken_exits_rather_than_hanging(stack: Stack, tmp_path: Path) -> None:
    """uvicorn stops at once when it cannot bind, with the completion listener just started:
    a cancel redis-py swallows there left the process waiting for it, deaf to SIGTERM."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        log = tmp_path / "api.log"
        api = start_api(stack, port, log)
        try:
            code = api.wait(timeout=90)
        finally:
            stop_group(api, signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert code != 0, text
    assert "address already in use" in text and "Application shutdown complete" in text, text
    assert "Traceback" not in text


def test_the_api_command_refuses_a_taken_port_before_starting(stack: Stack) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "router.cli.main", "api", "--port", str(port)],
            env=stack.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2, result
    assert result.stderr == (
        f"error: port {port} on 127.0.0.1 (the API) is in use, by another toolrouter or"
        " another program; free it or set --port\n"
    )
