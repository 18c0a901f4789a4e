"""Every process on a host of its own, and hosts cut off under load (network namespaces).

Redis, PostgreSQL, the API, two workers, the approval worker and the maintenance host
(reaper, reconciler, beat) each run in a network namespace of their own, joined by a
bridge (``tests.support.netns``). While an agent keeps submitting calls, one worker host's
link is pulled and put back, then the API's traffic to Redis is dropped and let through
again. Every call the API accepted finishes, none that is not idempotent runs twice, a
call the API refused (503) never runs, and nothing answers 500.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, text

from router.cli import processes
from router.db.engine import make_engine
from router.db.migrate import upgrade
from router.runtime import Runtime
from router.status import CallStatus

from ..support.faults import ledger_runs
from ..support.launcher import wait_for_http
from ..support.netns import Host, NamespacesUnavailable, Network
from ..support.private_postgres import init_cluster, serve
from ..support.stack import TOOL_QUEUES, Stack, stack_env, worker_argv
from ..support.waiting import wait_for, wait_until_finished

pytestmark = pytest.mark.postgres
# How long a host stays cut off: well inside a run's lease, so no run is given up on.
CUT_S = 4.0
# Calls submitted while the API cannot reach Redis.
CUT_CALLS = 3
KINDS = ("ledger", "ledger_idempotent")
REDIS = ["redis-server", "--port", "6379", "--save", "", "--appendonly", "no"]


def start_postgres(host: Host, folder: Path) -> subprocess.Popen[bytes]:
    """A PostgreSQL server of its own on ``host``, trusting every local connection."""
    data = init_cluster(folder)
    # The other hosts connect over the bridge's subnet (initdb trusts loopback only).
    with (data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
        hba.write(f"host all all {host.ip.rsplit('.', 1)[0]}.0/24 trust\n")
    options = ["-c", f"listen_addresses={host.ip}", "-c", f"unix_socket_directories={folder}"]
    return serve(folder, options, host.run)


def start_redis(host: Host, folder: Path) -> subprocess.Popen[bytes]:
    with (folder / "redis.log").open("ab") as log:
        return subprocess.Popen(
            # Only the bridge's private hosts reach it.
            host.run([*REDIS, "--bind", host.ip, "--protected-mode", "no"]),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class Hosts:
    def __init__(self, network: Network, stack: Stack, runtime: Runtime, api: str) -> None:
        self.network, self.stack, self.runtime, self.api = network, stack, runtime, api


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    try:
        network = Network(subnet=os.getpid() % 200 + 20)
    except NamespacesUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the separate-hosts test: {exc}")
        pytest.skip(str(exc))
    state_dir = tmp_path_factory.mktemp("separate-hosts")
    servers: list[subprocess.Popen[bytes]] = []
    stack: Stack | None = None
    runtime: Runtime | None = None
    # PostgreSQL's own user must reach its folder: not under the tests' 0700 tree.
    pg_folder = Path(tempfile.mkdtemp(prefix="tr-hosts-pg-")) / "pg"
    try:
        named = {
            name: network.add(name)
            for name in ("redis", "db", "api", "worker1", "worker2", "approvals", "ops")
        }
        servers.append(start_redis(named["redis"], state_dir))
        servers.append(start_postgres(named["db"], pg_folder))
        admin = f"postgresql+psycopg://postgres@{named['db'].ip}:5432/postgres"

        def postgres_answers() -> bool:
            try:
                engine = create_engine(admin, isolation_level="AUTOCOMMIT")
                with engine.connect() as conn:
                    conn.execute(text("CREATE DATABASE toolrouter"))
                engine.dispose()
                return True
            except Exception:
                return False

        wait_for(postgres_answers, 60, "PostgreSQL on its host")
        env = stack_env(
            database_url=admin.rsplit("/", 1)[0] + "/toolrouter",
            redis_url=f"redis://{named['redis'].ip}:6379/0",
            state_dir=state_dir,
            TOOLROUTER_REQUEUE_AFTER_S="2",
        )
        stack = Stack(env=env, state_dir=state_dir)
        engine = make_engine(env["TOOLROUTER_DATABASE_URL"])
        upgrade(engine)
        engine.dispose()
        runtime = Runtime(stack.settings)
        runtime.prepare()
        stack.keys["agent"] = runtime.keys.create("agent", ["agent"])
        api = named["api"]
        stack.start("api", api.run(processes.api_argv(stack.settings, host=api.ip, port=8000)))
        for name, queues in (("worker1", TOOL_QUEUES), ("worker2", TOOL_QUEUES)):
            stack.start(name, named[name].run(worker_argv(name, queues, concurrency=1)))
        stack.start(
            "approvals",
            named["approvals"].run(worker_argv("approvals", "approvals", concurrency=1)),
        )
        stack.start(
            "maintenance",
            named["ops"].run(worker_argv("maintenance", "maintenance", concurrency=1)),
        )
        stack.start("beat", named["ops"].run(processes.beat_argv(stack.settings)))
        stack.base_url = f"http://{api.ip}:8000"
        wait_for_http(f"{stack.base_url}/healthz", stack.processes["api"], stack.log("api"))
        for name in ("worker1", "worker2", "approvals", "maintenance"):
            wait_for(lambda name=name: "ready." in stack.log(name), 60, f"{name} ready")
        yield Hosts(network, stack, runtime, api.ip)
    finally:
        if stack is not None:
            stack.stop_all()
        if runtime is not None:
            runtime.close()
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
        network.close()
        subprocess.run(["rm", "-rf", str(pg_folder.parent)], check=False)


def ledger_lines(path: Path) -> list[list[str]]:
    """The ledger tool's lines, split: call id, attempt, pid of the pool process."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text(encoding="utf-8").splitlines()]


def test_hosts_cut_off_under_load_lose_no_call_and_run_none_twice(
    hosts: Hosts, capsys: pytest.CaptureFixture[str]
) -> None:
    stack, runtime, network = hosts.stack, hosts.runtime, hosts.network
    ledger = stack.state_dir / f"ledger-{uuid.uuid4().hex[:8]}.txt"
    accepted: dict[str, str] = {}
    # (sent, answered, HTTP status, error) of every submission.
    answers: list[tuple[float, float, int, str]] = []
    stop = threading.Event()

    def keep_submitting() -> None:
        with stack.client(timeout=120) as http:
            i = 0
            while not stop.is_set():
                tool = KINDS[i % len(KINDS)]
                args = {"path": str(ledger), "sleep": 0.05}
                sent = time.monotonic()
                response = http.post("/v1/calls", json={"tool": tool, "args": args})
                body = response.json()
                answers.append(
                    (sent, time.monotonic(), response.status_code, body.get("error") or "")
                )
                if response.status_code == 200:
                    accepted[body["call_id"]] = tool
                i += 1

    agent = threading.Thread(target=keep_submitting, daemon=True)
    agent.start()
    try:
        wait_for(lambda: len(ledger_runs(ledger)) >= 10, 60, "runs on both workers")
        worker1 = network.hosts["worker1"]
        pool = {str(p.pid) for p in psutil.Process(stack.processes["worker1"].pid).children()}
        network.cut(worker1)
        cut_at = time.monotonic()
        before_cut = len(ledger_lines(ledger))
        wait_for(lambda: time.monotonic() - cut_at >= CUT_S, 60, "the cut's end")
        # Cut off, the worker runs at most the call it had claimed: it cannot claim another.
        runs_while_cut = [line for line in ledger_lines(ledger)[before_cut:] if line[2] in pool]
        network.restore(worker1)
        restored_at = time.monotonic()
        during_cut = sum(
            1 for _, at, code, _ in answers if cut_at <= at < restored_at and code == 200
        )

        done = len(ledger_runs(ledger))
        wait_for(lambda: len(ledger_runs(ledger)) >= done + 10, 60, "runs after the restore")
        api, redis_host = network.hosts["api"], network.hosts["redis"]
        network.drop(api, redis_host)
        dropped_at = time.monotonic()
        # The API cannot publish: a call waits out the broker's timeouts, then is refused
        # (503, failed, never run) or, if the reconciler on the maintenance host (which
        # still reaches Redis) published it meanwhile, answered as it stands.
        wait_for(
            lambda: sum(1 for sent, *_ in answers if sent > dropped_at) >= CUT_CALLS,
            120,
            "calls submitted while the API cannot reach Redis",
        )
        network.undrop(api, redis_host)
        undropped_at = time.monotonic()
        wait_for(
            lambda: any(sent > undropped_at and code == 200 for sent, _, code, _ in answers),
            60,
            "the API taking calls again",
        )
    finally:
        stop.set()
        agent.join(timeout=60)
    rows = wait_until_finished(runtime, list(accepted), timeout=120)
    runs = ledger_runs(ledger)
    lost = [c for c in accepted if rows[c] is None or rows[c].status != CallStatus.SUCCEEDED]
    unrun = [c for c in accepted if not runs.get(c)]
    doubled = [c for c, tool in accepted.items() if tool == "ledger" and runs.get(c, 0) > 1]
    codes = sorted({code for _, _, code, _ in answers})
    refused = [error for _, _, code, error in answers if code == 503]
    cut_off = [
        (answered - sent, code)
        for sent, answered, code, _ in answers
        if dropped_at < sent < undropped_at
    ]
    strangers = sorted(set(runs) - set(accepted))
    with capsys.disabled():
        print(
            f"\n[separate hosts] accepted={len(accepted)} accepted_during_worker_cut={during_cut}"
            f" refused_503={len(refused)} lost={len(lost)} unrun={len(unrun)}"
            f" doubled={len(doubled)} statuses={codes}"
            f" cut_from_redis: answers={[code for _, code in cut_off]}"
            f" slowest={max(seconds for seconds, _ in cut_off):.1f}s"
        )
    assert len(runs_while_cut) <= 1, runs_while_cut
    assert set(codes) <= {200, 503}, codes
    assert all(error.startswith("unavailable") for error in refused), refused[:3]
    assert lost == [], {c: rows[c].status if rows[c] else None for c in lost}
    assert unrun == []
    assert doubled == [], {c: runs[c] for c in doubled}
    # A refused call never runs: every run is of a call the agent was told is accepted.
    assert strangers == []
