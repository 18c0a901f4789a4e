"""Keys and inbox sessions written or changed in the database, without the secret key,
count for nothing (a real API process, both databases):

- a key row inserted by hand (its token's SHA-256 and the approver role) is refused, on
  the API and as the decider of an approval;
- a role added to a real key in the database makes that key refused, not stronger;
- a revoked key set back to unrevoked stays refused;
- an inbox session row inserted by hand, or a real one pointed at another key, opens
  nothing;
- a real inbox session given a later expiry in the database opens nothing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import text

from router.runtime import Runtime

from ..support.calls import submit_pending
from ..support.inbox import (
    inbox_page,
    is_inbox_of,
    is_login_page,
    session_cookie,
    sign_in,
)
from ..support.stack import Stack
from ..support.trust import eventually, runtime_of


@pytest.fixture
def rt(stack: Stack) -> Iterator[Runtime]:
    with runtime_of(stack.settings) as runtime:
        yield runtime


def client_of(stack: Stack, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=stack.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def write(rt: Runtime, sql: str, **params: object) -> None:
    with rt.engine.begin() as conn:
        conn.execute(text(sql), params)


def test_a_key_written_into_the_database_is_no_key(stack: Stack, rt: Runtime) -> None:
    token = secrets.token_urlsafe(32)
    name = f"mallory-{secrets.token_hex(4)}"
    write(
        rt,
        "INSERT INTO api_keys (name, token_hash, roles, created_at) "
        "VALUES (:name, :hash, :roles, 1)",
        name=name,
        hash=sha256(token),
        roles=json.dumps(["approver"]),
    )
    call = submit_pending(stack, tool="high_echo", args={"forged": 1})
    with client_of(stack, token) as http:
        assert http.get("/v1/approvals").status_code == 401
        approve = http.post(f"/v1/approvals/{call['request_id']}/approve", json={})
    assert approve.status_code == 401, approve.text
    # An operator sees it for what it is.
    listed = {key["name"]: key for key in rt.keys.list()}
    assert listed[name]["sealed"] is False and listed["approver"]["sealed"] is True
    with stack.client("agent") as http:
        assert http.get(f"/v1/calls/{call['call_id']}").json()["status"] == "pending"


def test_a_role_added_in_the_database_unmakes_the_key(stack: Stack, rt: Runtime) -> None:
    name = f"agent-{secrets.token_hex(4)}"
    token = rt.keys.create(name, ["agent"])
    with client_of(stack, token) as http:
        assert http.get("/v1/tools").status_code == 200
    write(
        rt,
        "UPDATE api_keys SET roles = :roles WHERE name = :name",
        roles=json.dumps(["agent", "approver"]),
        name=name,
    )
    # The API keeps a key's principal a few seconds, and forgets them all at a revocation.
    other = f"gone-{secrets.token_hex(4)}"
    rt.keys.create(other, ["agent"])
    rt.keys.revoke(other)
    with client_of(stack, token) as http:
        # Before the seal, the key came back an approver (200); it is no key now.
        eventually(lambda: http.get("/v1/approvals").status_code == 401, "the key refused")


def test_a_revoked_key_set_back_stays_revoked(stack: Stack, rt: Runtime) -> None:
    name = f"agent-{secrets.token_hex(4)}"
    token = rt.keys.create(name, ["agent"])
    rt.keys.revoke(name)
    write(rt, "UPDATE api_keys SET revoked_at = NULL WHERE name = :name", name=name)
    with client_of(stack, token) as http:
        assert http.get("/v1/tools").status_code == 401


def test_a_session_written_into_the_database_opens_nothing(stack: Stack, rt: Runtime) -> None:
    cookie = secrets.token_urlsafe(32)
    write(
        rt,
        "INSERT INTO ui_sessions (id_hash, key_name, created_at, expires_at) "
        "VALUES (:id_hash, 'approver', 1, :expires)",
        id_hash=sha256(cookie),
        expires=2**62,
    )
    assert is_login_page(inbox_page(stack.base_url, cookie))
    # A real session of one approver, pointed at another key in the database.
    mine = session_cookie(sign_in(stack.base_url, stack.keys["approver2"]))
    assert is_inbox_of(inbox_page(stack.base_url, mine), "approver2")
    write(
        rt,
        "UPDATE ui_sessions SET key_name = 'admin' WHERE id_hash = :id_hash",
        id_hash=sha256(mine),
    )
    assert is_login_page(inbox_page(stack.base_url, mine))


def test_a_session_given_a_later_expiry_in_the_database_opens_nothing(
    stack: Stack, rt: Runtime
) -> None:
    stretched = session_cookie(sign_in(stack.base_url, stack.keys["approver2"]))
    untouched = session_cookie(sign_in(stack.base_url, stack.keys["approver2"]))
    for cookie in (stretched, untouched):
        assert is_inbox_of(inbox_page(stack.base_url, cookie), "approver2")
    # An attacker with the database keeps a stolen session alive: the seal stays as it was.
    write(
        rt,
        "UPDATE ui_sessions SET expires_at = expires_at + :more WHERE id_hash = :id_hash",
        more=365 * 24 * 3_600_000,
        id_hash=sha256(stretched),
    )
    assert is_login_page(inbox_page(stack.base_url, stretched))
    # The same key's other session still opens the inbox: only the changed row is refused.
    assert is_inbox_of(inbox_page(stack.base_url, untouched), "approver2")
