"""Redis and Flower are untrusted: attacks on the real running stack by someone who holds
Redis (every key, queue and channel of it) and Flower's password, but no approver key and
not the deployment's secret. Each attack must change nothing.

To show that a forgery had no effect, the test first sends it, then does something
legitimate that the same process handles after it (a real approval through the same
queue, a real call), and only then looks: by that time the forgery has been dealt with.
Each test prints one line of what was tried and what happened.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis

from router.canonical import args_digest
from router.cli import processes
from router.clock import wall_clock_ms
from router.constants import (
    CALL_DONE_CHANNEL,
    DECIDE_TASK,
    KEYS_CHANGED_CHANNEL,
    RESULT_CACHE,
)
from router.messaging.completions import Notifier
from router.messaging.namespace import Namespace
from router.runtime import Runtime
from router.trust.keyring import KeyRing, Purpose

from ..support import services
from ..support.audit import audit_events
from ..support.launcher import REPO, free_port, stop_group
from ..support.redis_attacker import (
    attacker_celery,
    call_status,
    canary_approval,
    decide,
    decision_body,
    redis_client,
    released_by_a_real_approval,
    request_detail,
    send_decision,
    submit,
    submit_gated,
    untrusted,
)
from ..support.stack import Stack, stack_env

UNTRUSTED_DECISION_LOG = "ignored a decision message that no API process made"
# Where completions were announced before namespaces: nobody may listen there any more.
LEGACY_CALL_DONE = "toolrouter:call-done"
DEADLINE_S = 60.0


# -- helpers ---------------------------------------------------------------------------


def backend_of(stack: Stack) -> str:
    return "sqlite" if (stack.settings.database_url or "").startswith("sqlite") else "postgresql"


def wait_until(check: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    """``check()``'s first truthy value; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.1)


def log_count(stack: Stack, name: str, needle: str) -> int:
    return stack.log(name).count(needle)


def other_keyring() -> KeyRing:
    """A key that is not the deployment's: what an attacker can make tags with."""
    return KeyRing(secrets.token_bytes(32), source="attacker")


def real_keyring(stack: Stack) -> KeyRing:
    """The deployment's own key (only to make a real tag that the test then spoils)."""
    runtime = Runtime(stack.settings)
    try:
        return runtime.keyring
    finally:
        runtime.close()


# -- 1. forged decisions ---------------------------------------------------------------


def test_forged_decision_messages_change_nothing(stack: Stack) -> None:
    backend = backend_of(stack)
    namespace = Namespace.of(stack.settings)
    call, args = submit_gated(stack)
    target = call["request_id"]
    elsewhere, _ = submit_gated(stack)
    genuine = real_keyring(stack)
    queue_key = namespace.prefix + "tools.high"  # the tool queue's list, as kombu names it

    forgeries: dict[str, dict[str, Any]] = {}
    forgeries["no tag"] = decision_body(namespace, target, "approver")
    forgeries["empty tag"] = {**decision_body(namespace, target, "approver"), "mac": ""}
    forgeries["tag made with another key"] = decision_body(
        namespace, target, "approver", keyring=other_keyring()
    )
    # Real tags, spoilt after tagging: made for a key that may not approve, then renamed;
    # made for another request, then pointed at this one; made as a deny, turned approve.
    renamed = decision_body(namespace, target, "agent2", keyring=genuine)
    forgeries["real tag, actor changed"] = {**renamed, "actor": "approver"}
    moved = decision_body(namespace, elsewhere["request_id"], "approver", keyring=genuine)
    forgeries["real tag, request_id changed"] = {**moved, "request_id": target}
    flipped = decision_body(namespace, target, "approver", decision="deny", keyring=genuine)
    forgeries["real tag, decision changed"] = {**flipped, "decision": "approve"}
    forgeries["reply_to a queue, no tag"] = decision_body(
        namespace, target, "approver", reply_to=queue_key
    )
    # Even a real tag does not make a queue a reply list (the reply namespace is checked).
    forgeries["reply_to a queue, real tag"] = decision_body(
        namespace, target, "approver", reply_to=queue_key, keyring=genuine
    )
    reply_lists = [body["reply_to"] for body in forgeries.values() if body["reply_to"] != queue_key]

    counted_before = untrusted(stack, "decision")
    logged_before = log_count(stack, "approvals", UNTRUSTED_DECISION_LOG)
    worker_log_before = len(stack.log("worker"))
    with attacker_celery(stack) as app:
        for body in forgeries.values():
            send_decision(app, body)
    sent = len(forgeries)

    # Decided after every forgery by the same one-process approval worker.
    canary_approval(stack)
    assert call_status(stack, call["call_id"])["status"] == "pending"
    detail = request_detail(stack, target)
    assert (detail["status"], detail["decisions"]) == ("pending", [])
    assert [e for e, _ in audit_events(stack, call["call_id"])] == ["pending"]
    with redis_client(stack) as client:
        replies = sum(int(client.llen(key)) for key in reply_lists)
    assert replies == 0
    logged = wait_until(
        lambda: (
            (n := log_count(stack, "approvals", UNTRUSTED_DECISION_LOG) - logged_before) >= sent
            and n
        ),
        "the approval worker logs each forgery",
    )
    counted = wait_until(
        lambda: (n := untrusted(stack, "decision") - counted_before) >= sent and n,
        "each forgery is counted",
    )
    assert (logged, counted) == (sent, sent)

    # The request is still the real approver's to decide; the tool queue still serves
    # (nothing was pushed into it as a "reply").
    released_by_a_real_approval(stack, call, args)
    assert call_status(stack, elsewhere["call_id"])["status"] == "pending"
    new_worker_log = stack.log("worker")[worker_log_before:]
    assert "Traceback" not in new_worker_log and "decode" not in new_worker_log.lower()
    print(
        f"[{backend}] forged decisions ({', '.join(forgeries)}): sent={sent} applied=0 "
        f"replies={replies} untrusted_counted={counted:g} logged={logged}; "
        "real approval afterwards: released, ran"
    )


# -- 2. N-of-M with invented approvers -------------------------------------------------


def test_invented_approvers_do_not_count_towards_n_of_m(stack: Stack) -> None:
    backend = backend_of(stack)
    namespace = Namespace.of(stack.settings)
    call, args = submit_gated(stack, "two_man")
    target = call["request_id"]
    attacker = other_keyring()
    forgeries = [
        decision_body(namespace, target, "ghost1"),
        decision_body(namespace, target, "ghost2"),
        decision_body(namespace, target, "ghost1", keyring=attacker),
        decision_body(namespace, target, "ghost2", keyring=attacker),
        # Real approvers' names, without their keys.
        decision_body(namespace, target, "approver2"),
        decision_body(namespace, target, "approver3", keyring=attacker),
    ]
    counted_before = untrusted(stack, "decision")
    logged_before = log_count(stack, "approvals", UNTRUSTED_DECISION_LOG)
    with attacker_celery(stack) as app:
        for body in forgeries:
            send_decision(app, body)

    # The real first approval goes through the same queue after them: one of two.
    first = decide(stack, target)
    assert first.status_code == 200, first.text
    answer = first.json()
    assert (answer["approvals"], answer["approvals_required"], answer["released"]) == (
        1,
        2,
        False,
    )
    detail = request_detail(stack, target)
    assert detail["status"] == "pending"
    assert [(d["approver"], d["decision"]) for d in detail["decisions"]] == [
        ("approver", "approve")
    ]
    assert call_status(stack, call["call_id"])["status"] == "pending"
    counted = wait_until(
        lambda: (n := untrusted(stack, "decision") - counted_before) >= len(forgeries) and n,
        "each forgery is counted",
    )
    logged = log_count(stack, "approvals", UNTRUSTED_DECISION_LOG) - logged_before
    assert (counted, logged) == (len(forgeries), len(forgeries))

    # approver2's name was forged, not its decision: its own approval is its first.
    second = decide(stack, target, key="approver2", wait_s=30)
    assert second.status_code == 200, second.text
    second_answer = second.json()
    assert (second_answer.get("status"), second_answer.get("value")) == ("succeeded", args), (
        second_answer
    )
    events = audit_events(stack, call["call_id"])
    assert events == [
        ("pending", "agent"),
        ("approved", "approver"),
        ("approved", "approver2"),
        ("ok", events[-1][1]),
    ]
    print(
        f"[{backend}] forged two_man decisions (ghost1, ghost2, approver2, approver3; "
        f"untagged and tagged with another key): sent={len(forgeries)} applied=0 "
        f"untrusted_counted={counted:g}; real approval -> approvals 1 of 2, not released; "
        "approver2's own approval -> released, ran"
    )


# -- 3. forged completions -------------------------------------------------------------


def forged_result(call_id: str, tool: str = "high_echo") -> str:
    return json.dumps(
        {
            "call_id": call_id,
            "result": {
                "status": "succeeded",
                "tool": tool,
                "value": "paid",
                "error": None,
                "error_type": None,
                "request_id": None,
                "answered_by": None,
            },
        },
        separators=(",", ":"),
    )


def captured_completion(stack: Stack, client: redis.Redis) -> str:
    """A real, tagged completion heard on the deployment's channel (anyone on Redis can
    subscribe), of a call of the attacker's choosing that answers "paid"."""
    channel = Namespace.of(stack.settings).key(CALL_DONE_CHANNEL)
    pubsub = client.pubsub()
    try:
        pubsub.subscribe(channel)
        wait_until(lambda: pubsub.get_message(timeout=1.0) is not None, "the capture is subscribed")
        done = submit(stack, "value", {"value": "paid"}, wait_s=30)
        assert done["status"] == "succeeded", done

        def heard() -> str | None:
            message = pubsub.get_message(timeout=1.0)
            if message is None or message.get("type") != "message":
                return None
            data = message["data"].decode()
            return data if done["call_id"] in data else None

        captured: str = wait_until(heard, "the real completion is heard")
    finally:
        pubsub.close()
    assert captured.startswith("{") and "paid" in captured  # it carried the value, tagged
    return captured.replace(done["call_id"], "{CALL_ID}")


def test_forged_completions_never_become_an_answer(stack: Stack) -> None:
    backend = backend_of(stack)
    namespace = Namespace.of(stack.settings)
    channel = namespace.key(CALL_DONE_CHANNEL)
    call, args = submit_gated(stack)
    call_id = call["call_id"]
    attacker = other_keyring()
    counted_before = untrusted(stack, "completion")

    with redis_client(stack) as client:
        replayed = captured_completion(stack, client).replace("{CALL_ID}", call_id)
        untagged = forged_result(call_id)
        on_channel = [
            untagged,
            f"{untagged}|{attacker.sign(Purpose.COMPLETION, untagged)}",
            f"{untagged}|{'0' * 64}",
            replayed,  # a real tag, over another call's id
            call_id,  # a bare wake-up
        ]
        on_legacy = [untagged, call_id]

        answers: list[httpx.Response] = []

        def agent_waits() -> None:
            with stack.client("agent") as http:
                answers.append(http.get(f"/v1/calls/{call_id}", params={"wait_s": 5}))

        waiting = threading.Thread(target=agent_waits)
        waiting.start()
        published = receivers = legacy_receivers = 0
        while waiting.is_alive():
            for message in on_channel:
                receivers += int(client.publish(channel, message))
                published += 1
            for message in on_legacy:
                legacy_receivers += int(client.publish(LEGACY_CALL_DONE, message))
                published += 1
            waiting.join(timeout=0.2)
    assert len(answers) == 1
    answer = answers[0].json()
    assert answers[0].status_code == 200, answer
    assert answer["status"] == "pending" and "value" not in answer, answer
    assert receivers >= 1  # the API was listening to every round of forgeries
    assert legacy_receivers == 0
    counted = untrusted(stack, "completion") - counted_before
    # Each result-carrying forgery heard while the agent waited was checked and counted.
    assert counted >= 1

    # What the database holds, afterwards too; and the real completion still gets through.
    assert call_status(stack, call_id)["status"] == "pending"
    released_by_a_real_approval(stack, call, args)
    final = call_status(stack, call_id)
    assert (final.get("status"), final.get("value")) == ("succeeded", args), final
    print(
        f"[{backend}] forged completions while an agent waited 5 s: published={published} "
        f"(namespaced={receivers} heard, legacy channel heard by {legacy_receivers}) "
        f"untrusted_counted={counted:g}; agent was told status={answer['status']}, "
        "never 'succeeded'/'paid'; after a real approval: succeeded with the real value"
    )


# -- 4. forged cached results ----------------------------------------------------------


def ledger_runs(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_planted_cached_results_are_not_answers(stack: Stack, tmp_path: Path) -> None:
    backend = backend_of(stack)
    namespace = Namespace.of(stack.settings)
    tool = "cached_ledger"  # cache_ttl_s: 60 in tests/tools.yaml
    ledger = tmp_path / "ledger.txt"

    def args_of(label: str) -> dict[str, Any]:
        return {"path": str(ledger), "label": label}

    def cache_key(args: dict[str, Any]) -> str:
        return namespace.key(RESULT_CACHE, tool, args_digest(args))

    planted_value = json.dumps({"pid": -1, "planted": True})
    attacker = other_keyring()
    counted_before = untrusted(stack, "cached_result")
    with redis_client(stack) as client:
        # A genuine cached entry, to copy from.
        genuine_args = args_of("genuine")
        genuine = submit(stack, tool, genuine_args, wait_s=30)
        assert genuine["status"] == "succeeded", genuine
        genuine_entry = client.get(cache_key(genuine_args))
        assert genuine_entry is not None

        plants: dict[str, tuple[dict[str, Any], bytes | str]] = {}
        untagged = args_of("untagged")
        plants["untagged"] = (untagged, planted_value)
        other_tag = args_of("other-key")
        digest = args_digest(other_tag)
        expires = wall_clock_ms() + 60_000
        tag = attacker.sign(Purpose.COMPLETION, f"{tool}|{digest}|{expires}|{planted_value}")
        plants["tag made with another key"] = (other_tag, f"{tag}|{expires}|{planted_value}")
        copied = args_of("copied")
        plants["real entry copied from other args"] = (copied, genuine_entry)
        for args, stored in plants.values():
            client.set(cache_key(args), stored, ex=60)

        runs_before = len(ledger_runs(ledger))
        answers = {
            label: submit(stack, tool, args, wait_s=30) for label, (args, _) in plants.items()
        }
        for label, answer in answers.items():
            assert answer["status"] == "succeeded", (label, answer)
            value = answer.get("value") or {}
            assert set(value) == {"pid"} and value["pid"] > 0, (label, answer)
        # (A copied entry may hold the same pid as the real run: the ledger tells runs apart.)
        ran = ledger_runs(ledger)[runs_before:]
        ran_ids = {line.split()[0] for line in ran}
        assert ran_ids == {answer["call_id"] for answer in answers.values()}, ran
    counted = wait_until(
        lambda: (n := untrusted(stack, "cached_result") - counted_before) >= len(plants) and n,
        "each planted value is counted",
    )
    assert counted == len(plants)

    # The cache still works for what the worker put there itself.
    again = submit(stack, tool, untagged, wait_s=30)
    assert (again.get("status"), again.get("value")) == (
        "succeeded",
        answers["untagged"]["value"],
    ), again
    assert len(ledger_runs(ledger)) == runs_before + len(plants)
    print(
        f"[{backend}] planted cached results ({', '.join(plants)}): planted={len(plants)} "
        f"served=0 tool_runs={len(ran)} untrusted_counted={counted:g}; "
        "a repeat call was served from the genuine cache entry"
    )


# -- 5. Flower -------------------------------------------------------------------------


@contextmanager
def running_flower(stack: Stack) -> Iterator[tuple[str, tuple[str, str]]]:
    """Flower as ``toolrouter up`` starts it, on a free port: (base url, basic auth)."""
    port = free_port()
    settings = stack.settings.model_copy(update={"flower_port": port, "flower_host": "127.0.0.1"})
    login = processes.flower_env(settings)
    user, _, password = login["FLOWER_BASIC_AUTH"].partition(":")
    log_path = stack.state_dir / "flower.log"
    with log_path.open("ab") as log:
        flower = subprocess.Popen(
            processes.flower_argv(settings),
            env={**stack.env, **login},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            if flower.poll() is not None:
                raise AssertionError(f"Flower exited:\n{log_path.read_text(errors='replace')}")
            try:
                return (
                    httpx.get(f"{base}/workers", auth=(user, password), timeout=5).status_code
                    == 200
                )
            except httpx.HTTPError:
                return False

        wait_until(answers, "Flower answers", timeout=90)
        yield base, (user, password)
    finally:
        stop_group(flower)


@pytest.mark.timeout(300)
def test_flower_can_watch_but_not_act(stack: Stack) -> None:
    backend = backend_of(stack)
    namespace = Namespace.of(stack.settings)
    call, args = submit_gated(stack)
    host = socket.gethostname()
    workers = [f"worker@{host}", f"approvals@{host}"]
    forged = decision_body(namespace, call["request_id"], "approver")
    acting: list[tuple[str, dict[str, Any] | None]] = [
        (f"/api/task/async-apply/{DECIDE_TASK}", {"args": [forged]}),
        (f"/api/task/send-task/{DECIDE_TASK}", {"args": [forged]}),
        (f"/api/task/apply/{DECIDE_TASK}", {"args": [forged]}),
        (f"/api/task/revoke/{uuid.uuid4()}?terminate=true", None),
        (f"/api/task/rate-limit/{DECIDE_TASK}", None),
        (f"/api/task/timeout/{DECIDE_TASK}", None),
    ]
    for worker in workers:
        acting += [
            (f"/api/worker/shutdown/{worker}", None),
            (f"/api/worker/pool/grow/{worker}?n=1", None),
            (f"/api/worker/pool/shrink/{worker}?n=1", None),
            (f"/api/worker/pool/autoscale/{worker}?min=1&max=4", None),
            (f"/api/worker/queue/add-consumer/{worker}?queue=tools.high", None),
            (f"/api/worker/queue/cancel-consumer/{worker}?queue=approvals", None),
        ]
    refused: dict[str, int] = {}
    with running_flower(stack) as (base, auth), httpx.Client(base_url=base, timeout=30) as http:
        for path, body in acting:
            response = http.post(path, json=body, auth=auth) if body else http.post(path, auth=auth)
            refused[path] = response.status_code
        metrics_anonymous = http.get("/metrics").status_code
        metrics_login = http.get("/metrics", auth=auth).status_code
        workers_page = http.get("/api/workers", auth=auth).status_code
        tasks_page = http.get("/tasks", auth=auth).status_code
    assert refused == {path: 403 for path, _ in acting}
    assert (metrics_anonymous, metrics_login) == (401, 200)
    assert (workers_page, tasks_page) == (200, 200)

    # The workers kept serving: a real decision and a real call go through after all that.
    canary_approval(stack)
    echoed = submit(stack, "echo", {"after": "flower"}, wait_s=30)
    assert (echoed.get("status"), echoed.get("value")) == ("succeeded", {"after": "flower"}), echoed
    assert all(stack.processes[name].poll() is None for name in ("api", "worker", "approvals"))
    assert call_status(stack, call["call_id"])["status"] == "pending"
    assert request_detail(stack, call["request_id"])["decisions"] == []
    released_by_a_real_approval(stack, call, args)
    print(
        f"[{backend}] Flower with its password: acting endpoints tried={len(acting)} "
        f"refused_403={sum(code == 403 for code in refused.values())}; "
        f"/metrics anonymous={metrics_anonymous} with login={metrics_login}; "
        f"/api/workers={workers_page} /tasks={tasks_page}; request stayed pending, "
        "workers kept serving"
    )


# -- 6. two deployments on one Redis db ------------------------------------------------


def worker_pids(stack: Stack, name: str = "worker") -> set[int]:
    main = psutil.Process(stack.processes[name].pid)
    return {main.pid} | {child.pid for child in main.children(recursive=True)}


def ran_on(stack: Stack, call_id: str) -> int:
    """The pid of the worker process that ran the call, from its audit row."""
    events = audit_events(stack, call_id)
    actors = [actor for event, actor in events if event == "ok"]
    assert len(actors) == 1, events
    assert actors[0].startswith("worker@"), actors
    return int(actors[0].rsplit(":", 1)[1])


@pytest.mark.timeout(300)
def test_two_deployments_share_one_redis_db_without_crossing(
    stack: Stack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    backend = backend_of(stack)
    state_dir = tmp_path_factory.mktemp("deployment-b")
    other = Stack(
        env=stack_env(
            database_url=services.fresh_sqlite_url(state_dir),
            redis_url=stack.settings.redis_url or "",
            state_dir=state_dir,
        ),
        state_dir=state_dir,
    )
    assert other.settings.redis_url == stack.settings.redis_url
    ns_a, ns_b = Namespace.of(stack.settings), Namespace.of(other.settings)
    assert ns_a != ns_b
    setup = Runtime(other.settings)
    try:
        setup.prepare()
        for name, roles in {
            "agent": ["agent"],
            "operator": ["operator"],
            "doomed": ["agent"],
        }.items():
            other.keys[name] = setup.keys.create(name, roles)
    finally:
        setup.close()
    try:
        other.start_api()
        other.start_worker(concurrency=1)
        per_deployment = 20

        def one(target: Stack, label: str, i: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
            args = {"deployment": label, "i": i}
            return label, args, submit(target, "echo", args, wait_s=30)

        jobs = [(stack, "A", i) for i in range(per_deployment)]
        jobs += [(other, "B", i) for i in range(per_deployment)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda job: one(*job), jobs))
        for label, args, answer in results:
            assert (answer.get("status"), answer.get("value")) == ("succeeded", args), (
                label,
                answer,
            )

        pids = {"A": worker_pids(stack), "B": worker_pids(other)}
        assert not pids["A"] & pids["B"]
        ran: dict[str, set[int]] = {"A": set(), "B": set()}
        for label, _, answer in results:
            ran[label].add(ran_on(stack if label == "A" else other, answer["call_id"]))
        assert ran["A"] <= pids["A"], (ran, pids)
        assert ran["B"] <= pids["B"], (ran, pids)

        # Revoking a key in B: heard and acknowledged by B's API only.
        with other.client("doomed") as doomed:
            assert doomed.get("/v1/tools").status_code == 200  # cached by B's API
            with redis_client(stack) as client:
                subscribers = dict(
                    client.pubsub_numsub(
                        ns_a.key(KEYS_CHANGED_CHANNEL), ns_b.key(KEYS_CHANGED_CHANNEL)
                    )
                )
            revoker = Runtime(other.settings)
            try:
                revoker.keys.revoke("doomed")
                keyring_b = revoker.keyring
            finally:
                revoker.close()
            refused = doomed.get("/v1/tools")
        assert refused.status_code == 401, refused.text
        keyring_a = real_keyring(stack)
        redis_url = stack.settings.redis_url or ""
        acks = {}
        for label, namespace, keyring in (
            ("B", ns_b, keyring_b),
            ("A", ns_a, keyring_a),
            ("B's channel, A's key", ns_b, keyring_a),
        ):
            notifier = Notifier(redis_url, namespace, keyring)
            try:
                acks[label] = notifier.keys_changed().heard
            finally:
                notifier.client.close()
        assert acks == {"B": 1, "A": 1, "B's channel, A's key": 0}
        assert subscribers == {
            ns_a.key(KEYS_CHANGED_CHANNEL).encode(): 1,
            ns_b.key(KEYS_CHANGED_CHANNEL).encode(): 1,
        }
        with stack.client("agent") as http:
            assert http.get("/v1/tools").status_code == 200
        with other.client("agent") as http:
            assert http.get("/v1/tools").status_code == 200
    finally:
        other.stop_all()
    cross = acks["B's channel, A's key"]
    print(
        f"[{backend}] two deployments on one Redis db ({ns_a.name} / {ns_b.name}): "
        f"calls A={per_deployment} B={per_deployment} all succeeded; ran on A's worker "
        f"pids={sorted(ran['A'])} B's={sorted(ran['B'])} (no crossing); revocation in B: "
        f"key refused 401 by B, acks B={acks['B']} A={acks['A']} "
        f"B-with-A's-key={cross}; A's keys still work"
    )
