"""The inbox sign-in throttle of an API running as two processes on one port: failed
sign-ins from one address are counted once for the deployment (in Redis), whichever
process each attempt reaches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from router.constants import LOGIN_FAILURES
from router.messaging.namespace import Namespace
from router.runtime import Runtime

from ..support import services
from ..support.api_processes import client_port, serving_pid
from ..support.stack import Stack, stack_env

# Redis db of this module's stack (flushed before and after).
REDIS_DB = 4
SESSION_COOKIE = "tr_session"


@dataclass
class TwoProcessApi:
    stack: Stack
    token: str
    redis_url: str


@pytest.fixture
def two_process_api(redis_base: str, tmp_path: Path) -> Iterator[TwoProcessApi]:
    """An API only (no workers needed to sign in) with ``TOOLROUTER_API_PROCESSES=2``, on
    a SQLite database and Redis db of its own, and an approver key."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    redis_url = f"{redis_base}/{REDIS_DB}"
    services.flush(redis_url)
    stack = Stack(
        env=stack_env(
            database_url=services.fresh_sqlite_url(state_dir),
            redis_url=redis_url,
            state_dir=state_dir,
            TOOLROUTER_API_PROCESSES="2",
        ),
        state_dir=state_dir,
    )
    runtime = Runtime(stack.settings)
    try:
        runtime.prepare()
        token = runtime.keys.create("approver", ["approver"])
    finally:
        runtime.close()
    try:
        stack.start_api()
        yield TwoProcessApi(stack, token, redis_url)
    finally:
        stack.stop_all()
        services.flush(redis_url)


class Attempts:
    """Sign-in attempts, each on a new connection, aimed at a chosen API process: new
    connections are opened (and dropped) until the kernel hands one to that process."""

    def __init__(self, the_api: TwoProcessApi, timeout_s: float = 120) -> None:
        self.stack, self.base_url = the_api.stack, the_api.stack.base_url
        self.timeout_s = timeout_s
        self.served_by: list[tuple[int, int]] = []  # (pid, status) of each attempt

    def connection(self, to: int | None = None) -> tuple[httpx.Client, int, int]:
        """A new connection (kept alive) to process ``to`` (any when None): the client, the
        pid of the process and the connection's local port."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            http = httpx.Client(base_url=self.base_url, timeout=30)
            probe = http.get("/healthz")
            assert probe.status_code == 200
            port = client_port(probe)
            pid = serving_pid(self.stack, port)
            if pid is not None and to in (None, pid):
                return http, pid, port
            http.close()
            if time.monotonic() > deadline:
                raise AssertionError(f"no connection reached API process {to} in time")

    def both_processes(self) -> tuple[int, int]:
        """The two API processes, once each has taken a connection (the second may still
        be starting when the first answers)."""
        seen: set[int] = set()
        deadline = time.monotonic() + self.timeout_s
        while len(seen) < 2:
            http, pid, _ = self.connection()
            http.close()
            seen.add(pid)
            if time.monotonic() > deadline:
                raise AssertionError(f"only API processes {seen} took connections")
        first, second = sorted(seen)
        return first, second

    def sign_in(self, key: str, on: int) -> httpx.Response:
        http, pid, port = self.connection(to=on)
        try:
            response = http.post("/ui/login", data={"key": key}, headers={"Origin": self.base_url})
            assert client_port(response) == port  # the same connection, so the same process
        finally:
            http.close()
        self.served_by.append((pid, response.status_code))
        return response


def test_failed_sign_ins_across_two_api_processes_are_throttled_after_the_limit_in_total(
    two_process_api: TwoProcessApi,
) -> None:
    allowed = two_process_api.stack.settings.ui_login_failures_per_minute
    attempts = Attempts(two_process_api)
    pids = attempts.both_processes()
    # Wrong keys, alternating between the processes: one short of the limit.
    early = [attempts.sign_in(f"trk_guess-{i}", on=pids[i % 2]) for i in range(allowed - 1)]
    assert [r.status_code for r in early] == [401] * (allowed - 1)
    # Before the limit the right key signs in, on either process; a success does not count.
    for pid in pids:
        ok = attempts.sign_in(two_process_api.token, on=pid)
        assert ok.status_code == 303 and ok.cookies.get(SESSION_COOKIE)
    last = attempts.sign_in("trk_guess-last", on=pids[(allowed - 1) % 2])
    assert last.status_code == 401  # the limit-th failure, in total
    # Now both processes refuse the address, the right key as well as a wrong one.
    refused = [
        attempts.sign_in(key, on=pid)
        for pid in pids
        for key in (two_process_api.token, "trk_guess-more")
    ]
    assert [r.status_code for r in refused] == [429] * 4
    for response in refused:
        assert SESSION_COOKIE not in response.cookies
        assert "Too many failed sign-ins from your address; try again in" in response.text
    failed_on = {pid for pid, status in attempts.served_by if status == 401}
    assert failed_on == set(pids)  # both processes took some of the failures
    # The count is the deployment's, in its Redis namespace: the limit's worth, no more.
    client = redis.Redis.from_url(two_process_api.redis_url)
    try:
        counts = Namespace.of(two_process_api.stack.settings).key(LOGIN_FAILURES, "*")
        (key,) = list(client.scan_iter(match=counts))
        assert client.zcard(key) == allowed
        assert 0 < client.pttl(key) <= 61_000
    finally:
        client.close()
    per_process = {pid: [status for p, status in attempts.served_by if p == pid] for pid in pids}
    print(
        f"sign-in throttle, 2 API processes: {allowed} wrong keys in total -> 429 on both; "
        f"statuses by process: {per_process}"
    )


def test_wrong_keys_sent_at_once_to_two_api_processes_get_past_the_limit_no_more(
    two_process_api: TwoProcessApi,
) -> None:
    allowed = two_process_api.stack.settings.ui_login_failures_per_minute
    sent = 4 * allowed
    base_url = two_process_api.stack.base_url
    start = threading.Barrier(sent)

    def guess(i: int) -> tuple[int, int | None]:
        # A connection of its own, opened before the barrier: the requests go out together.
        with httpx.Client(base_url=base_url, timeout=60) as http:
            pid = serving_pid(two_process_api.stack, client_port(http.get("/healthz")))
            start.wait()
            response = http.post(
                "/ui/login", data={"key": f"trk_guess-{i}"}, headers={"Origin": base_url}
            )
            return response.status_code, pid

    with ThreadPoolExecutor(sent) as pool:
        answers = list(pool.map(guess, range(sent)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [401] * allowed + [429] * (sent - allowed), statuses
    pids = {pid for _, pid in answers}
    client = redis.Redis.from_url(two_process_api.redis_url)
    try:
        counts = Namespace.of(two_process_api.stack.settings).key(LOGIN_FAILURES, "*")
        (key,) = list(client.scan_iter(match=counts))
        assert client.zcard(key) == allowed
    finally:
        client.close()
    print(
        f"sign-in throttle, {sent} wrong keys at once to 2 API processes (reached: {pids}): "
        f"{statuses.count(401)} tried, {statuses.count(429)} refused"
    )
