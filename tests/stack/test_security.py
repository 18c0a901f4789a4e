"""Who may do what, ids nobody can guess, and arguments that never leave the database
(SPEC §2, §5, §8, §9, §13).

- Every ``/v1`` endpoint the API documents, for every kind of key (agent, another agent,
  approver, a custom approver role, a role the system gives no meaning, operator, admin),
  no key and a revoked key: exactly the answer SPEC §8/§9 gives that caller.
- Call and request ids are 128 random bits: distinct, with no fixed or counting part.
- Arguments are never written to a process log at INFO, and the Celery message carries the
  call id and the tool name only.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import select

from router import ids
from router.db.schema import api_keys
from router.runtime import Runtime

from ..support.stack import Stack

CALL_ID = re.compile(r"^call_[0-9a-f]{32}$")
REQUEST_ID = re.compile(r"^req-[0-9a-f]{32}$")
API_IDS = 300  # call ids drawn through the API, in one batch

# -- the matrix ---------------------------------------------------------------------------

PRINCIPALS = (
    "agent",  # owns every resource below
    "agent2",  # another agent
    "approver",  # approves high_echo
    "finance",  # a custom approver role (finance_wire's)
    "custom",  # a role nothing in the system gives meaning to
    "operator",
    "admin",
    "nokey",
    "revoked",  # held every role, then was revoked
)


def answers(default: int, **overrides: int) -> dict[str, int]:
    """The status each principal gets; without a valid key it is always 401."""
    table = {who: overrides.get(who, default) for who in PRINCIPALS}
    table.update(nokey=401, revoked=401)
    return table


READ_OWN = answers(404, agent=200, operator=200, admin=200)
# SPEC §8 (who) and §9 (roles), endpoint by endpoint.
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    ("POST", "/v1/calls"): answers(403, agent=200, agent2=200),
    ("GET", "/v1/calls/{call_id}"): READ_OWN,
    # Only the requester cancels; this call has finished, so the requester gets 409.
    ("DELETE", "/v1/calls/{call_id}"): answers(404, agent=409),
    ("POST", "/v1/batches"): answers(403, agent=200, agent2=200),
    ("GET", "/v1/batches/{batch_id}"): READ_OWN,
    ("GET", "/v1/batches/{batch_id}/results"): READ_OWN,
    # Keys with an approver role (a custom one too) and operators; each approver sees only
    # what it may decide (checked below).
    ("GET", "/v1/approvals"): answers(200, agent=403, agent2=403),
    ("GET", "/v1/approvals/{request_id}"): answers(
        404, agent=200, approver=200, operator=200, admin=200
    ),
    ("POST", "/v1/approvals/{request_id}/approve"): answers(403, approver=200),
    ("POST", "/v1/approvals/{request_id}/deny"): answers(403, approver=200),
    ("GET", "/v1/audit"): answers(403, operator=200, admin=200),
    ("GET", "/v1/audit/verify"): answers(403, operator=200, admin=200),
    ("GET", "/v1/notifications"): answers(403, operator=200, admin=200),
    ("GET", "/v1/tools"): answers(200),
    ("GET", "/v1/tools/{name}"): answers(200),
    ("GET", "/v1/tools/{name}/stats"): answers(200),
    ("POST", "/v1/route"): answers(403, agent=200, agent2=200),
}


@dataclass
class World:
    """Keys for every principal, and resources owned by ``agent``."""

    stack: Stack
    tokens: dict[str, str]
    call_id: str
    batch_id: str
    request_id: str  # a pending high_echo request nobody may decide in the matrix
    finance_request_id: str

    def client(self, who: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who != "nokey" else {}
        return httpx.Client(base_url=self.stack.base_url, headers=headers, timeout=60)

    def fresh_request(self) -> str:
        with self.client("agent") as http:
            body = http.post("/v1/calls", json={"tool": "high_echo", "args": {"n": 1}}).json()
        assert body["status"] == "pending", body
        return str(body["request_id"])


def temporary_key(stack: Stack, roles: list[str], *, revoke: bool = False) -> str:
    runtime = Runtime(stack.settings)
    try:
        name = f"sec-{uuid.uuid4().hex[:12]}"
        token = runtime.keys.create(name, roles)
        if revoke:
            runtime.keys.revoke(name)
        return token
    finally:
        runtime.close()


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    tokens = {who: stack.keys[who] for who in ("agent", "agent2", "approver", "finance")}
    tokens.update(operator=stack.keys["operator"], admin=stack.keys["admin"], nokey="")
    tokens["custom"] = temporary_key(stack, ["intern"])
    tokens["revoked"] = temporary_key(
        stack, ["agent", "approver", "finance", "operator", "admin"], revoke=True
    )
    with stack.client("agent") as http:
        call = http.post("/v1/calls", json={"tool": "echo", "args": {}, "wait_s": 30}).json()
        assert call["status"] == "succeeded", call
        batch = http.post("/v1/batches", json={"calls": [{"tool": "echo", "args": {}}]}).json()
        gated = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()
        wire = http.post("/v1/calls", json={"tool": "finance_wire", "args": {}}).json()
    world = World(
        stack,
        tokens,
        call["call_id"],
        batch["batch_id"],
        gated["request_id"],
        wire["request_id"],
    )
    yield world
    # Leave no pending request behind for the other tests' approvers.
    with stack.client("agent") as http:
        for call_id in (gated["call_id"], wire["call_id"]):
            http.delete(f"/v1/calls/{call_id}")


def backend(stack: Stack) -> str:
    return "postgresql" if "postgresql" in stack.settings.resolved_database_url else "sqlite"


def v1_operations(stack: Stack) -> set[tuple[str, str]]:
    with stack.client("") as http:
        paths = http.get("/openapi.json").json()["paths"]
    return {
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/v1")
        for method in operations
    }


def request_for(
    world: World, operation: tuple[str, str], who: str
) -> tuple[str, str, dict[str, Any] | None]:
    method, template = operation
    expected = EXPECTED[operation][who]
    request_id = world.request_id
    if template.endswith(("/approve", "/deny")) and expected == 200:
        request_id = world.fresh_request()  # a success spends its request
    path = (
        template.replace("{call_id}", world.call_id)
        .replace("{batch_id}", world.batch_id)
        .replace("{request_id}", request_id)
        .replace("{name}", "echo")
    )
    bodies = {
        "/v1/calls": {"tool": "echo", "args": {"by": who}},
        "/v1/batches": {"calls": [{"tool": "echo", "args": {"by": who}}]},
        "/v1/route": {"task": "echo the arguments"},
    }
    body = bodies.get(template, {} if method == "POST" else None)
    return method, path, body


def test_the_matrix_covers_every_documented_v1_endpoint(stack: Stack) -> None:
    assert v1_operations(stack) == set(EXPECTED)


def test_every_role_gets_exactly_its_answer_from_every_v1_endpoint(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong: list[tuple[str, str, str, int, int, str]] = []
    outcomes: Counter[int] = Counter()
    for operation in sorted(EXPECTED):
        for who in PRINCIPALS:
            method, path, body = request_for(world, operation, who)
            with world.client(who) as http:
                response = http.request(method, path, json=body)
            outcomes[response.status_code] += 1
            expected = EXPECTED[operation][who]
            if response.status_code != expected:
                wrong.append((who, method, path, expected, response.status_code, response.text))
                continue
            if expected != 200:
                error = response.json()
                assert set(error) == {"ok", "error"} and error["ok"] is False, error
    with capsys.disabled():
        print(
            f"\n[{backend(world.stack)}] role matrix:"
            f" cells={sum(outcomes.values())} wrongly_admitted="
            f"{sum(1 for w in wrong if w[4] == 200)} wrongly_refused="
            f"{sum(1 for w in wrong if w[3] == 200)} by_status={dict(sorted(outcomes.items()))}"
        )
    assert [w[:5] for w in wrong] == [], [w[5][:200] for w in wrong[:3]]

    # Nothing the refused callers did touched the shared request.
    with world.client("operator") as http:
        shared = http.get(f"/v1/approvals/{world.request_id}").json()["request"]
    assert (shared["status"], shared["decisions"]) == ("pending", [])


def listed(world: World, who: str) -> set[str]:
    with world.client(who) as http:
        response = http.get("/v1/approvals")
    assert response.status_code == 200, response.text
    return {r["request_id"] for r in response.json()["requests"]}


def test_approvals_list_shows_each_key_only_what_it_may_decide(world: World) -> None:
    mine = {world.request_id, world.finance_request_id}
    assert listed(world, "approver") & mine == {world.request_id}
    assert listed(world, "finance") & mine == {world.finance_request_id}
    assert listed(world, "operator") & mine == mine
    assert listed(world, "custom") & mine == set()
    # A key that can decide nothing is told so, not shown an empty inbox.
    with world.client("agent") as http:
        response = http.get("/v1/approvals")
    assert response.status_code == 403
    assert response.json() == {
        "ok": False,
        "error": "approver or operator role required to list approval requests",
    }


def test_the_custom_approver_role_decides_its_own_tool_only(world: World) -> None:
    with world.client("finance") as http:
        refused = http.post(f"/v1/approvals/{world.fresh_request()}/approve", json={})
        granted = http.post(f"/v1/approvals/{world.finance_request_id}/approve", json={})
    assert refused.status_code == 403, refused.text
    assert granted.status_code == 200, granted.text
    assert granted.json()["status"] == "approved"


def test_a_key_that_is_both_requester_and_approver_cannot_approve_its_own_request(
    stack: Stack,
) -> None:
    with stack.client("approving_agent") as http:
        request_id = http.post("/v1/calls", json={"tool": "high_echo", "args": {}}).json()[
            "request_id"
        ]
        response = http.post(f"/v1/approvals/{request_id}/approve", json={})
        assert response.status_code == 403
        assert response.json() == {"ok": False, "error": "requester cannot approve own request"}
        with stack.client("approver") as other:
            assert other.post(f"/v1/approvals/{request_id}/deny", json={}).status_code == 200


def test_a_token_one_character_off_is_refused_and_tokens_are_stored_as_hashes_only(
    stack: Stack,
) -> None:
    token = stack.keys["operator"]
    near = token[:-1] + ("A" if token[-1] != "A" else "B")
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        assert http.get("/v1/tools", headers={"Authorization": f"Bearer {token}"}).is_success
        refused = http.get("/v1/tools", headers={"Authorization": f"Bearer {near}"})
    assert refused.status_code == 401
    runtime = Runtime(stack.settings)
    try:
        with runtime.store.reading() as conn:
            stored = [tuple(row) for row in conn.execute(select(api_keys))]
    finally:
        runtime.close()
    assert stored and not any(token in str(value) for row in stored for value in row)


# -- ids ----------------------------------------------------------------------------------


def assert_random_hex(values: list[str], prefix: str, *, skip: int = 0) -> None:
    """Distinct; and past the first ``skip`` hex digits no position is fixed or counts (a
    clock or a sequence would leave positions taking few values), and the bits are about
    half ones."""
    assert len(set(values)) == len(values)
    digits = [value.removeprefix(prefix) for value in values]
    assert all(len(d) == 32 for d in digits)
    random_part = [d[skip:] for d in digits]
    for position in range(32 - skip):
        values_here = {d[position] for d in random_part}
        assert len(values_here) == 16, f"position {skip + position} is not random"
    bits = 4 * (32 - skip) * len(digits)
    ones = sum(bin(int(d, 16)).count("1") for d in random_part)
    # Within 4.5 standard deviations of half: a fair source fails this once in 150,000.
    assert abs(ones / bits - 0.5) < 4.5 * 0.5 / bits**0.5


# Call ids start with 12 hex digits of milliseconds (index locality, see router.ids).
CALL_ID_CLOCK_DIGITS = 12


def test_request_ids_are_128_random_bits() -> None:
    values = [ids.new_request_id() for _ in range(20_000)]
    assert all(REQUEST_ID.match(value) for value in values)
    assert_random_hex(values, "req-")


def test_call_ids_are_the_time_then_80_random_bits() -> None:
    before = time.time_ns() // 1_000_000
    values = [ids.new_call_id() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    assert all(CALL_ID.match(value) for value in values)
    assert_random_hex(values, "call_", skip=CALL_ID_CLOCK_DIGITS)
    stamps = [int(v[5 : 5 + CALL_ID_CLOCK_DIGITS], 16) for v in values]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= after


def test_ids_handed_out_by_the_api_are_random_and_distinct(stack: Stack) -> None:
    with stack.client("agent") as http:
        batch = http.post(
            "/v1/batches", json={"calls": [{"tool": "echo", "args": {}} for _ in range(API_IDS)]}
        ).json()
        wait_done(http, batch["batch_id"])
        lines = http.get(f"/v1/batches/{batch['batch_id']}/results").text.splitlines()
        call_ids = [json.loads(line)["call_id"] for line in lines]
        gated = [
            http.post("/v1/calls", json={"tool": "high_echo", "args": {"same": 1}}).json()
            for _ in range(40)
        ]
        for body in gated:
            http.delete(f"/v1/calls/{body['call_id']}")
    assert len(call_ids) == API_IDS and all(CALL_ID.match(c) for c in call_ids)
    request_ids = [body["request_id"] for body in gated]
    # Identical calls, yet every request id is its own nonce.
    assert all(REQUEST_ID.match(r) for r in request_ids)
    assert len(set(request_ids)) == 40
    assert_random_hex(call_ids, "call_", skip=CALL_ID_CLOCK_DIGITS)


def wait_done(http: httpx.Client, batch_id: str) -> None:
    deadline = time.monotonic() + 60
    while not http.get(f"/v1/batches/{batch_id}").json()["done"]:
        assert time.monotonic() < deadline, "batch did not finish"
        time.sleep(0.1)


# -- arguments stay in the database -----------------------------------------------------------


def test_arguments_never_reach_a_process_log(stack: Stack) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    with stack.client("agent") as http:
        ran = http.post(
            "/v1/calls", json={"tool": "echo", "args": {"password": secret}, "wait_s": 30}
        ).json()
        failed = http.post(
            "/v1/calls",
            json={"tool": "value_error", "args": {"message": "no", "pin": secret}, "wait_s": 30},
        ).json()
        invalid = http.post(
            "/v1/calls", json={"tool": "strict", "args": {"to": secret, "amount": "x"}}
        ).json()
        gated = http.post("/v1/calls", json={"tool": "high_echo", "args": {"token": secret}})
        batch = http.post(
            "/v1/batches", json={"calls": [{"tool": "echo", "args": {"key": secret}}]}
        ).json()
        wait_done(http, batch["batch_id"])
    with stack.client("approver") as http:
        approved = http.post(
            f"/v1/approvals/{gated.json()['request_id']}/approve", json={"wait_s": 30}
        ).json()
    assert ran["status"] == "succeeded" and ran["value"] == {"password": secret}
    assert failed["status"] == "failed"
    assert invalid["status"] == "rejected"
    assert approved["status"] == "succeeded"

    logs = sorted(stack.state_dir.glob("*.log"))
    assert {path.stem for path in logs} >= {"api", "worker", "approvals"}
    hits = {path.name: path.read_text(errors="replace").count(secret) for path in logs}
    # The worker ran at INFO meanwhile (its start is logged), and wrote nothing of the
    # arguments: no line per task, and its failures name no value.
    assert "ready." in stack.log("worker")
    assert sum(hits.values()) == 0, hits


def test_the_celery_message_carries_the_call_id_and_tool_name_only(runtime: Runtime) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    result = runtime.dispatcher.submit("agent", "echo", {"password": secret})
    assert result.status == "queued"
    client = redis.Redis.from_url(runtime.redis_url)
    try:
        raw = client.lrange(runtime.namespace.prefix + "tools.low", 0, -1)
        everything = b"".join(dump_all(client))
    finally:
        client.close()
    assert len(raw) == 1
    message = json.loads(raw[0])
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([result.call_id], {"tool": "echo"})
    assert message["headers"]["task"] == "toolrouter.run_call"
    assert secret.encode() not in raw[0] and secret.encode() not in everything


def dump_all(client: redis.Redis) -> Iterator[bytes]:
    """Every value in the Redis db, whatever its type."""
    readers: dict[bytes, Callable[[bytes], list[Any]]] = {
        b"list": lambda key: client.lrange(key, 0, -1),
        b"hash": lambda key: [*client.hkeys(key), *client.hvals(key)],
        b"set": lambda key: list(client.smembers(key)),
        b"zset": lambda key: client.zrange(key, 0, -1),
        b"string": lambda key: [client.get(key)],
    }
    for key in client.scan_iter():
        kind = client.type(key)
        for value in readers.get(kind, lambda _: [])(key):
            yield key + b"=" + (value or b"")
