"""An approver is told a decision failed only if it will never be applied (SPEC §5). Redis
is not trusted (SPEC §16): someone holding it can drop the connection on which the API
waits for the approval worker's answer, after the decision went out. The API listens
again and tells the approver what the worker did, not that the decision failed."""

from __future__ import annotations

import threading
import time

from router.constants import DECISION_REPLY
from router.messaging.namespace import Namespace

from ..support.audit import audit_events
from ..support.redis_attacker import decide, redis_client, submit_gated
from ..support.stack import Stack


def drop_the_first_wait_for_an_answer(stack: Stack, dropped: list[int]) -> None:
    """Kill the first connection blocked in ``BLPOP`` on the stack's Redis database."""
    with redis_client(stack) as client:
        db = int(client.connection_pool.connection_kwargs.get("db", 0))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for connection in client.client_list():
                if connection.get("cmd") == "blpop" and int(connection["db"]) == db:
                    client.client_kill_filter(_id=connection["id"])
                    dropped.append(int(connection["id"]))
                    return
            time.sleep(0.001)


def test_a_dropped_wait_for_the_answer_is_not_told_as_a_failed_decision(stack: Stack) -> None:
    call, args = submit_gated(stack)
    dropped: list[int] = []
    killer = threading.Thread(target=drop_the_first_wait_for_an_answer, args=(stack, dropped))
    killer.start()
    try:
        response = decide(stack, call["request_id"])
    finally:
        killer.join()

    print(f"API's wait for the answer dropped: {bool(dropped)}; answered {response.status_code}")
    assert dropped
    assert response.status_code == 200, response.text
    assert response.json()["released"] is True
    with stack.client() as http:
        done = http.get(f"/v1/calls/{call['call_id']}", params={"wait_s": 30}).json()
    assert (done["status"], done["value"]) == ("succeeded", args), done
    assert [event for event, _ in audit_events(stack, call["call_id"])] == [
        "pending",
        "approved",
        "ok",
    ]


def keep_the_answer_from_the_api(stack: Stack, done: threading.Event) -> list[int]:
    """Until ``done``: kill every connection blocked in ``BLPOP`` on the stack's database
    and delete every decision answer waiting in its list, so the API never hears one."""
    answers = Namespace.of(stack.settings).key(DECISION_REPLY, "*")
    killed: list[int] = []
    with redis_client(stack) as client:
        db = int(client.connection_pool.connection_kwargs.get("db", 0))
        while not done.is_set():
            for connection in client.client_list():
                if connection.get("cmd") == "blpop" and int(connection["db"]) == db:
                    client.client_kill_filter(_id=connection["id"])
                    killed.append(int(connection["id"]))
            for key in client.scan_iter(match=answers):
                client.delete(key)
            time.sleep(0.001)
    return killed


def test_an_applied_decision_whose_answer_redis_lost_is_told_as_applied(stack: Stack) -> None:
    call, args = submit_gated(stack)
    done = threading.Event()
    killed: list[int] = []
    attacker = threading.Thread(
        target=lambda: killed.extend(keep_the_answer_from_the_api(stack, done))
    )
    attacker.start()
    try:
        response = decide(stack, call["request_id"])
    finally:
        done.set()
        attacker.join()

    print(f"API's waits killed: {len(killed)}; answered {response.status_code}")
    assert killed
    # The approval worker applied it: the approver hears so from the database.
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["status"], answer["released"], answer["approvals"]) == ("approved", True, 1)
    with stack.client() as http:
        done_call = http.get(f"/v1/calls/{call['call_id']}", params={"wait_s": 30}).json()
    assert (done_call["status"], done_call["value"]) == ("succeeded", args), done_call
