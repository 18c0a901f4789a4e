"""An API process stopping while a request waits for a call's outcome: uvicorn gives the
wait its graceful stop, then cancels it; the caller gets an answer, never a 500."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import httpx

from router.cli import processes

from ..support.launcher import REPO, free_port, stop_group, wait_for_http
from ..support.stack import Stack
from ..support.trust import call_rows_by
from ..support.waiting import wait_for
from .test_api_calls import temporary_key


def test_a_submission_waiting_when_the_api_stops_is_answered_503(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = temporary_key(stack, ["agent"])
    release = tmp_path / "release"
    port, log = free_port(), tmp_path / "api.log"
    with log.open("wb") as handle:
        api = subprocess.Popen(
            processes.api_argv(stack.settings, port=port),
            env=stack.env,
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
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
