"""`toolrouter up`, for real: every process starts, serves a call, and Ctrl-C stops all of it.

SPEC §2 and §13: on the embedded defaults (SQLite under the state directory, the built-in
example tools), `up` runs the API, a worker per risk queue, the approval worker, beat and
Flower, prints the URLs and two demo keys, and leaves nothing behind when stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from router.auth.keys import KeyStore
from router.cli.children import running_file, served_port_file
from router.cli.privredis import redis_answers, start_private_redis
from router.runtime import Runtime
from router.settings import Settings

from ..support import services
from ..support.launcher import REPO, free_port
from ..support.waiting import wait_for
from ..unit.test_process_definitions import procfile_commands

# Redis db of these tests (the README reserves 10-15 for the test-suite).
UP_REDIS_DB = 10
# Beyond `up`'s own wait for readiness (120 s) and stop grace (30 s by default).
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 120
CALL_ADD_1_2 = ["--args", '{"a": 1, "b": 2}', "--wait", "30"]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any TOOLROUTER_* variable, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLROUTER_")}
    # Each test's deployment keeps its key material in the tests' own secrets folder.
    env["TOOLROUTER_SECRETS_DIR"] = os.environ["TOOLROUTER_SECRETS_DIR"]
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def up_env(cwd: Path, state_dir: Path, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of an `up` started in ``cwd`` (made here), with a state directory,
    Redis and two free ports of its own."""
    cwd.mkdir()
    api_port, flower_port = free_port(), free_port()
    while flower_port == api_port:
        flower_port = free_port()
    return clean_env(
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_REDIS_URL=redis_url,
        TOOLROUTER_API_PORT=str(api_port),
        TOOLROUTER_FLOWER_PORT=str(flower_port),
        **extra,
    )


class Up:
    """`toolrouter up` as a subprocess whose output is collected line by line."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "router.cli.main", "up"],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            with self._lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, what: str, done: Callable[[list[str]], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if done(list(self.lines)):
                    return
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                with self._lock:
                    if done(list(self.lines)):
                        return
                pytest.fail(
                    f"`toolrouter up` exited with {self.process.returncode} before {what}:\n"
                    + self.output[-6000:]
                )
            time.sleep(0.1)
        pytest.fail(f"no {what} within {timeout} s:\n" + self.output[-6000:])

    def close(self) -> None:
        """Stop it however it is (SIGINT, then SIGKILL) and release the pipe."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def prefixed_names(lines: list[str]) -> set[str]:
    """Names of the children whose output `up` has relayed as ``name | line``."""
    return {m.group(1) for line in lines if (m := re.match(r"^(\S+)\s+\| ", line))}


def banner_value(output: str, label: str) -> str:
    match = re.search(rf"^\s*{label}\s+(\S+)", output, re.MULTILINE)
    assert match, f"{label!r} not in the banner:\n{output[-4000:]}"
    return match.group(1)


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running; a zombie has exited and only waits to be reaped."""
    running = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.NoSuchProcess:
            continue
    return running


def processes_of(state_dir: Path) -> list[psutil.Process]:
    """Live processes started with this state directory in their environment."""
    found = []
    wanted = {str(state_dir), str(state_dir.resolve())}
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("TOOLROUTER_STATE_DIR") in wanted:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def wait_until_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = alive(procs)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive(left)
    return left


def kill_all(procs: list[psutil.Process]) -> None:
    """Last resort after a failure: SIGKILL what this test started, by pid."""
    for proc in alive(procs):
        try:
            proc.kill()
        except psutil.Error:
            continue


@pytest.fixture
def up_redis_url(redis_base: str) -> Iterator[str]:
    url = f"{redis_base}/{UP_REDIS_DB}"
    services.flush(url)
    yield url
    services.flush(url)


@pytest.mark.timeout(300)
def test_up_runs_every_process_serves_a_call_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, up_redis_url: str
) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    # The running call below must finish within the grace (it sleeps 8 s).
    env = up_env(cwd, state_dir, up_redis_url, TOOLROUTER_STOP_GRACE_S="60")
    api_port, flower_port = int(env["TOOLROUTER_API_PORT"]), int(env["TOOLROUTER_FLOWER_PORT"])
    assert not (cwd / "toolrouter.yaml").exists()  # the built-in example config is served
    names = set(procfile_commands())
    workers = {name for name, argv in procfile_commands().items() if argv[1:2] == ["worker"]}
    workers |= {"approvals", "notifications"}
    up = Up(env, cwd)
    started: list[psutil.Process] = []
    try:
        up.wait_for(
            "'toolrouter is up'", lambda lines: "toolrouter is up" in lines, START_TIMEOUT_S
        )
        output = up.output
        api_url = banner_value(output, "API")
        flower_url = banner_value(output, "Flower")
        agent_key = banner_value(output, "demo agent key")
        approver_key = banner_value(output, "demo approver key")
        assert api_url == f"http://127.0.0.1:{api_port}"
        assert flower_url == f"http://127.0.0.1:{flower_port}"
        assert agent_key != approver_key
        assert "None" not in (agent_key, approver_key)
        assert str(state_dir.resolve()) in output

        # `up` prints the banner only once every Celery worker consumes; each process's
        # output is in its own log file, not on the terminal.
        logs = state_dir / "logs"
        assert {path.stem for path in logs.glob("*.log")} == names
        for worker in workers:
            assert "ready." in (logs / f"{worker}.log").read_text(encoding="utf-8"), worker
        assert_quiet(up.output)
        assert str(cwd / "toolrouter.yaml") not in output and "<built-in" in output

        with httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {agent_key}"}, timeout=60
        ) as http:
            response = http.post(
                "/v1/calls", json={"tool": "add", "args": {"a": 2, "b": 3}, "wait_s": 30}
            )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["ok"] is True, body
        assert body["status"] == "succeeded"
        assert body["value"] == 5

        # `toolrouter call` on the same settings finds the API and the demo agent key itself.
        cli = subprocess.run(
            [sys.executable, "-m", "router.cli.main", "call", "add", *CALL_ADD_1_2],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert json.loads(cli.stdout)["value"] == 3

        password = (state_dir / "flower-password").read_text(encoding="utf-8").strip()
        assert password and password in output
        assert_flower_answers(flower_url, password)

        assert_a_second_copy_is_refused(env, cwd, tmp_path, api_url, api_port)
        assert_status_and_logs_read_the_running_copy(env, cwd, names)

        # Ctrl-C lets a running handler finish: the call succeeds rather than being cut off.
        with httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {agent_key}"}, timeout=60
        ) as http:
            # Long enough to still run when Ctrl-C comes, on a loaded machine too.
            running = http.post("/v1/calls", json={"tool": "sleep", "args": {"seconds": 8}})
            running_id = running.json()["call_id"]
            wait_for(
                lambda: http.get(f"/v1/calls/{running_id}").json()["status"] == "running",
                60,
                "the sleep call to start",
            )

        # Commands run in this folder find the port it serves, recorded beside the key.
        settings = Settings(state_dir=state_dir, database_url="", redis_url=up_redis_url)
        port_file = served_port_file(settings)
        assert port_file.read_text(encoding="utf-8") == str(api_port)

        started = psutil.Process(up.process.pid).children(recursive=True)
        assert len(started) >= len(names)
        up.process.send_signal(signal.SIGINT)
        try:
            code = up.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`toolrouter up` still running {STOP_TIMEOUT_S} s after SIGINT")
        up.close()
        assert code == 0, up.output[-6000:]
        assert "stopped" in up.lines
        assert_no_tracebacks(logs)
        left = wait_until_gone(started, 10)
        assert not left, [(p.pid, p.cmdline()) for p in left]
        assert not processes_of(state_dir)
        # Nothing it recorded is left to point a later command at a port no longer served.
        assert not port_file.exists() and not running_file(settings).exists()
    finally:
        up.close()
        kill_all(started)
        kill_all(processes_of(state_dir))

    # The demo keys were stored in the state directory's database: any command sees them.
    runtime = Runtime(Settings(state_dir=state_dir, database_url="", redis_url=up_redis_url))
    try:
        keys = KeyStore(runtime.store, runtime.keyring)
        assert keys.authenticate(agent_key).roles == {"agent"}
        assert keys.authenticate(approver_key).roles == {"approver"}
        with runtime.store.reading() as conn:
            finished = runtime.store.get(conn, running_id)
        assert finished is not None and finished.status == "succeeded", finished
    finally:
        runtime.close()


def assert_quiet(output: str) -> None:
    """The terminal holds `up`'s own lines, not its processes' output."""
    assert not prefixed_names(output.splitlines()), output[-4000:]
    for noise in ("Warning", "celery@", "-------------- ", "Traceback"):
        assert noise not in output, f"{noise!r} on the terminal:\n{output[-4000:]}"
    assert len(output.splitlines()) < 30, output


def assert_no_tracebacks(logs: Path) -> None:
    """A warm stop leaves no traceback in any process's log (no WorkerLostError)."""
    for path in logs.glob("*.log"):
        text = path.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in text and "WorkerLostError" not in text, (path, text[-4000:])


def assert_status_and_logs_read_the_running_copy(
    env: dict[str, str], cwd: Path, names: set[str]
) -> None:
    status = toolrouter_cli(env, cwd, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    report = json.loads(status.stdout)
    assert report["healthy"] is True, report
    assert set(report["up"]) == names and all(p["running"] for p in report["up"].values())
    assert all(report["workers"]["by_queue"][queue] for queue in report["workers"]["by_queue"])
    assert report["redis"]["queue_depths"].keys() == report["workers"]["by_queue"].keys()
    assert report["database"]["pending_approvals"] == 0
    readable = toolrouter_cli(env, cwd, "status")
    assert readable.returncode == 0 and "approvals pending: 0" in readable.stdout, readable
    # Another shell naming another config is told the one `up` serves, and its own beside.
    other = cwd.parent / "other-toolrouter.yaml"
    other.write_text("tools: {}\n", encoding="utf-8")
    shell = toolrouter_cli({**env, "TOOLROUTER_CONFIG": str(other)}, cwd, "status", "--json")
    seen = json.loads(shell.stdout)
    assert seen["config"] == report["config"] and "<built-in" in seen["config"], seen
    assert seen["config_of_this_shell"] == str(other.resolve()), seen
    api_log = toolrouter_cli(env, cwd, "logs", "api", "-n", "5")
    assert api_log.returncode == 0 and 0 < len(api_log.stdout.splitlines()) <= 5, api_log
    every = toolrouter_cli(env, cwd, "logs", "-n", "1")
    assert prefixed_names(every.stdout.splitlines()) == names, every.stdout
    missing = toolrouter_cli(env, cwd, "logs", "nope")
    assert missing.returncode == 2 and "no log for 'nope'" in missing.stderr


def toolrouter_cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_up_once(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`toolrouter up` expected to refuse: it must exit by itself, quickly or not."""
    return subprocess.run(
        [sys.executable, "-m", "router.cli.main", "up"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_a_second_copy_is_refused(
    env: dict[str, str], cwd: Path, tmp_path: Path, api_url: str, api_port: int
) -> None:
    """A second `up` on the running copy's state directory, or on its ports, says so in one
    line, starts nothing, and leaves the running copy's files alone: its /metrics, whose
    folder a second copy used to delete, still answers."""
    same_state = run_up_once(env, cwd)
    assert same_state.returncode == 2, same_state.stdout + same_state.stderr
    assert "already running on" in same_state.stderr, same_state.stderr
    assert len(same_state.stderr.strip().splitlines()) == 1, same_state.stderr
    assert "toolrouter is up" not in same_state.stdout

    other_state = tmp_path / "other-state"
    same_ports = run_up_once({**env, "TOOLROUTER_STATE_DIR": str(other_state)}, cwd)
    assert same_ports.returncode == 2, same_ports.stdout + same_ports.stderr
    assert f"port {api_port} on 127.0.0.1 (the API) is in use" in same_ports.stderr
    assert "TOOLROUTER_API_PORT" in same_ports.stderr
    assert not (other_state / "toolrouter.db").exists()

    with httpx.Client(timeout=30) as http:
        metrics = http.get(f"{api_url}/metrics")
    assert metrics.status_code == 200, metrics.text[:2000]
    assert "toolrouter_calls_total" in metrics.text


@pytest.mark.parametrize("named", ["missing.yaml", ""], ids=["missing-file", "empty"])
def test_up_refuses_a_config_setting_that_names_no_file_before_touching_anything(
    tmp_path: Path, named: str
) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    env = clean_env(
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_CONFIG=named,
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
    )
    refused = run_up_once(env, cwd)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: config error: TOOLROUTER_CONFIG names"), refused.stderr
    assert "Traceback" not in refused.stdout + refused.stderr
    assert not state_dir.exists()


def assert_flower_answers(url: str, password: str) -> None:
    """Flower comes up alongside the API; give it a deadline, then check its basic auth."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last: object = None
    with httpx.Client(timeout=5) as http:
        while time.monotonic() < deadline:
            try:
                response = http.get(f"{url}/", auth=("admin", password))
            except httpx.HTTPError as exc:
                last = exc
            else:
                if response.status_code == 200:
                    break
                last = response.status_code
            time.sleep(0.2)
        else:
            pytest.fail(f"Flower at {url} did not answer 200 within {START_TIMEOUT_S} s: {last}")
        assert http.get(f"{url}/").status_code == 401
        assert http.get(f"{url}/", auth=("admin", password + "x")).status_code == 401
        # Flower's own Prometheus metrics, behind the same basic auth.
        metrics = http.get(f"{url}/metrics", auth=("admin", password))
        assert metrics.status_code == 200 and "flower_" in metrics.text


def test_private_redis_answers_keeps_an_append_only_file_and_stops(tmp_path: Path) -> None:
    process, url = start_private_redis(tmp_path)
    try:
        assert re.fullmatch(r"redis://127\.0\.0\.1:\d+/0", url), url
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            assert client.ping() is True
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert Path(client.config_get("dir")["dir"]) == (tmp_path / "redis").resolve()
        finally:
            client.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode is not None
    assert not redis_answers(url)


@pytest.mark.timeout(120)
def test_up_with_a_bad_config_exits_non_zero_naming_file_and_tool(tmp_path: Path) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    (cwd / "toolrouter.yaml").write_text(
        "tools:\n"
        '  - {name: twin, handler: "router.tools.demo_tools:echo"}\n'
        '  - {name: twin, handler: "router.tools.demo_tools:add"}\n',
        encoding="utf-8",
    )
    # No TOOLROUTER_REDIS_URL: `up` takes its own path to Redis (local, else a private one),
    # which must be given back too.
    env = clean_env(
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
    )
    up = Up(env, cwd)
    try:
        try:
            code = up.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("`toolrouter up` kept running on a broken config:\n" + up.output)
        up.close()
        output = up.output
        assert code != 0, output
        assert "toolrouter is up" not in output
        assert "toolrouter.yaml" in output, output
        assert "'twin'" in output, output
        assert "duplicate" in output.lower(), output
        assert "Traceback" not in output, output
        left = wait_until_gone(processes_of(state_dir), 10)
        assert not left, [(p.pid, p.cmdline()) for p in left]
    finally:
        up.close()
        kill_all(processes_of(state_dir))


@pytest.mark.timeout(300)
def test_an_unreachable_tool_server_gets_a_line_and_a_second_ctrl_c_stops_at_once(
    tmp_path: Path, up_redis_url: str
) -> None:
    cwd, state_dir = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    dead_port = free_port()  # nothing listens there
    example = (REPO / "router" / "example_tools.yaml").read_text(encoding="utf-8")
    (cwd / "toolrouter.yaml").write_text(
        example
        + "  - name: http_down\n"
        + f"    handler: {{http: {{url: 'http://127.0.0.1:{dead_port}/nothing'}}}}\n"
        # A handler that outlasts the test's bound below, and is allowed to.
        + "  - {name: nap, handler: 'router.tools.demo_tools:sleep', timeout_s: 600}\n",
        encoding="utf-8",
    )
    env = clean_env(
        TOOLROUTER_STATE_DIR=str(state_dir),
        TOOLROUTER_REDIS_URL=up_redis_url,
        TOOLROUTER_API_PORT=str(free_port()),
        TOOLROUTER_FLOWER_PORT=str(free_port()),
        # Longer than the test's bound below: only the second Ctrl-C can end it in time.
        TOOLROUTER_STOP_GRACE_S="600",
    )
    up = Up(env, cwd)
    started: list[psutil.Process] = []
    try:
        up.wait_for(
            "'toolrouter is up'", lambda lines: "toolrouter is up" in lines, START_TIMEOUT_S
        )
        api_url = banner_value(up.output, "API")
        agent_key = banner_value(up.output, "demo agent key")
        with httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {agent_key}"}, timeout=60
        ) as http:
            down = http.post("/v1/calls", json={"tool": "http_down", "wait_s": 30}).json()
            assert down["status"] == "failed", down
            up.wait_for(
                "a line naming the unreachable server",
                lambda lines: (
                    f"worker-low: tool server unreachable: http_down at 127.0.0.1:"
                    f"{dead_port}" in "\n".join(lines)
                ),
                60,
            )
            call_id = http.post("/v1/calls", json={"tool": "nap", "args": {"seconds": 300}}).json()[
                "call_id"
            ]
            wait_for(
                lambda: http.get(f"/v1/calls/{call_id}").json()["status"] == "running",
                60,
                "the sleep call to start",
            )
        started = psutil.Process(up.process.pid).children(recursive=True)
        up.process.send_signal(signal.SIGINT)
        up.wait_for("the warm stop", lambda lines: any("Ctrl-C again" in x for x in lines), 60)
        assert up.process.poll() is None, "the first Ctrl-C did not wait for the handler"
        up.process.send_signal(signal.SIGINT)
        try:
            code = up.process.wait(timeout=50)
        except subprocess.TimeoutExpired:
            pytest.fail("a second Ctrl-C did not stop `up` while the handler still ran")
        assert code == 0, up.output[-4000:]
        assert not wait_until_gone(started, 10)
    finally:
        up.close()
        kill_all(started)
        kill_all(processes_of(state_dir))
