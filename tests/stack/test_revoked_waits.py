"""A key revoked while its request waits for a call's outcome (``POST /v1/calls`` or
``GET /v1/calls/{id}`` with ``wait_s``) gets ``401 key revoked`` when the wait ends, not
the outcome: a revocation takes effect at once, as over MCP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from ..support.stack import Stack
from ..support.trust import call_rows_by
from ..support.waiting import wait_for
from .test_api_calls import client_with_token, revoke_key, temporary_key


def revoke_then_release(stack: Stack, name: str, token: str, release: Path) -> None:
    revoke_key(stack, name)
    wait_for(lambda: refused(stack, token), 30, "the API refusing the revoked key")
    release.touch()


def in_background(send: Any) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answers.append(send()), daemon=True)
    thread.start()
    return thread, answers


def test_a_key_revoked_while_its_submission_waits_gets_no_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = temporary_key(stack, ["agent"])
    release = tmp_path / "release"
    body = {"tool": "hold", "args": {"until": str(release)}, "wait_s": 60}
    with client_with_token(stack, token) as http:
        thread, answers = in_background(lambda: http.post("/v1/calls", json=body))
        # The call is stored: the request's key was checked and the wait is under way.
        wait_for(lambda: call_rows_by(stack, name) == 1, 60, "the call stored")
        revoke_then_release(stack, name, token, release)
        thread.join(90)
    (answer,) = answers
    assert answer.status_code == 401, answer.text
    assert answer.json() == {"ok": False, "error": "key revoked"}


def test_a_key_revoked_while_it_waits_on_its_call_gets_no_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    name, token = temporary_key(stack, ["agent"])
    release = tmp_path / "release"
    with client_with_token(stack, token) as http:
        submitted = http.post("/v1/calls", json={"tool": "hold", "args": {"until": str(release)}})
        call_id = submitted.json()["call_id"]
        thread, answers = in_background(lambda: http.get(f"/v1/calls/{call_id}?wait_s=60"))
        revoke_then_release(stack, name, token, release)
        thread.join(90)
    (answer,) = answers
    assert answer.status_code == 401, answer.text
    assert answer.json() == {"ok": False, "error": "key revoked"}


def test_a_key_revoked_while_its_approval_waits_gets_no_outcome(
    stack: Stack, tmp_path: Path
) -> None:
    """The approval itself stands (it was decided before the revocation) and the call runs
    to its end; only the outcome is withheld from the revoked key."""
    name, token = temporary_key(stack, ["approver"])
    release = tmp_path / "release"
    with stack.client() as agent:
        submitted = agent.post(
            "/v1/calls", json={"tool": "gated_hold", "args": {"until": str(release)}}
        )
        assert submitted.json()["status"] == "pending", submitted.text
        call_id, request_id = submitted.json()["call_id"], submitted.json()["request_id"]
        with client_with_token(stack, token) as http:
            thread, answers = in_background(
                lambda: http.post(f"/v1/approvals/{request_id}/approve", json={"wait_s": 60})
            )

            def running() -> bool:
                return agent.get(f"/v1/calls/{call_id}").json()["status"] == "running"

            wait_for(running, 60, "the approved call running")
            revoke_then_release(stack, name, token, release)
            thread.join(90)
        (answer,) = answers
        assert answer.status_code == 401, answer.text
        assert answer.json() == {"ok": False, "error": "key revoked"}
        finished = agent.get(f"/v1/calls/{call_id}?wait_s=60").json()
        assert finished["status"] == "succeeded", finished


def test_a_key_revoked_while_its_body_arrives_submits_nothing(stack: Stack) -> None:
    """A call's body and a batch's (which may take minutes to upload) are read after the
    key was checked: it is checked again once they are in."""
    for path, first, rest in (
        ("/v1/calls", b'{"tool": "echo", ', b'"args": {"n": 1}}'),
        ("/v1/batches", b'{"calls": [{"tool": "echo", "args": {}}, ', b'{"tool": "echo"}]}'),
    ):
        name, token = temporary_key(stack, ["agent"])
        with client_with_token(stack, token) as http:
            answer = http.post(
                path,
                content=revoked_between(stack, name, token, first, rest),
                headers={"Content-Type": "application/json"},
            )
        assert answer.status_code == 401, (path, answer.text)
        assert call_rows_by(stack, name) == 0, path


def revoked_between(
    stack: Stack, name: str, token: str, first: bytes, rest: bytes
) -> Iterator[bytes]:
    """A body sent in two parts, the key revoked (and refused by the API) between them."""
    yield first
    revoke_key(stack, name)
    wait_for(lambda: refused(stack, token), 30, "the API refusing the revoked key")
    yield rest


def refused(stack: Stack, token: str) -> bool:
    with client_with_token(stack, token) as http:
        return http.get("/v1/tools").status_code == 401
