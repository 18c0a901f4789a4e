"""The inbox sign-in throttle on real Redis: one count per address shared by every API
process, bounded keys that expire, and this process's own count when Redis is down or
lies."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from router.auth.sessions import LoginThrottle, throttled_as
from router.constants import LOGIN_FAILURES
from router.messaging.namespace import Namespace

from ..support import services
from ..support.launcher import free_port

LIMIT = 5
ADDRESS = "203.0.113.7"


class Seconds:
    """A monotonic clock that moves only when told to (this process's count)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def client(redis_base: str) -> Iterator[redis.Redis]:
    url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    services.flush(url)
    the_client = redis.Redis.from_url(url)
    yield the_client
    the_client.close()
    services.flush(url)


@pytest.fixture
def prefix() -> str:
    return Namespace(f"tr-test-{uuid.uuid4().hex[:8]}").key(LOGIN_FAILURES)


def process(client: redis.Redis, prefix: str, clock: Seconds | None = None) -> LoginThrottle:
    """The throttle of one API process: its own memory, the deployment's Redis."""
    return LoginThrottle(LIMIT, clock or Seconds(), shared=client, key_prefix=prefix)


def test_failures_in_several_processes_add_up_to_one_limit(
    client: redis.Redis, prefix: str
) -> None:
    first, second = process(client, prefix), process(client, prefix)
    for _ in range(3):
        assert first.wait_s(ADDRESS) == 0
        first.failed(ADDRESS)
    assert second.wait_s(ADDRESS) == 0
    second.failed(ADDRESS)
    assert [first.wait_s(ADDRESS), second.wait_s(ADDRESS)] == [0, 0]  # 4 of 5
    second.failed(ADDRESS)
    # A process that saw none of them (a third one, or one just restarted) waits too.
    waits = [p.wait_s(ADDRESS) for p in (first, second, process(client, prefix))]
    assert all(0 < wait <= LoginThrottle.WINDOW_S for wait in waits), waits
    # Another address has a count of its own.
    assert first.wait_s("203.0.113.8") == 0


def test_asking_counts_nothing_and_leaves_nothing_in_redis(
    client: redis.Redis, prefix: str
) -> None:
    throttle = process(client, prefix)
    assert [throttle.wait_s(ADDRESS) for _ in range(3 * LIMIT)] == [0] * (3 * LIMIT)
    assert client.exists(throttle.key(ADDRESS)) == 0


def test_keys_are_short_namespaced_bounded_and_expire(client: redis.Redis, prefix: str) -> None:
    throttle = process(client, prefix)
    address = "2001:db8::" + "f" * 5000  # whatever the client address is, the key is short
    for _ in range(3 * LIMIT):
        throttle.failed(address)
    (key,) = [k.decode() for k in client.scan_iter(match="*")]
    assert key == throttle.key(address)
    assert key.startswith(prefix + ":") and len(key) == len(prefix) + 1 + 64
    assert ADDRESS not in key and "2001" not in key
    assert client.zcard(key) == LIMIT  # only the newest failures that decide the wait
    assert 0 < client.pttl(key) <= (LoginThrottle.WINDOW_S + 1) * 1000


def test_failures_older_than_the_window_no_longer_count(client: redis.Redis, prefix: str) -> None:
    clock = Seconds()
    throttle = process(client, prefix, clock)
    throttle.WINDOW_S = 0.3  # the Redis server's clock cannot be moved: a short window
    for _ in range(LIMIT):
        throttle.failed(ADDRESS)
    recorded_by = server_us(client)
    clock.now += 1  # this process's count has moved past the window
    while server_us(client) < recorded_by + 400_000:
        time.sleep(0.05)  # until the server's own clock has too
    assert throttle.wait_s(ADDRESS) == 0
    assert process(client, prefix).wait_s(ADDRESS) == 0


def server_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


@pytest.fixture
def free_redis_port() -> int:
    """A port nothing listens on: Redis down."""
    return free_port()


def test_with_redis_down_each_process_counts_alone_and_never_fails(free_redis_port: int) -> None:
    clock = Seconds()
    down = redis.Redis(port=free_redis_port, socket_timeout=1, socket_connect_timeout=1)
    throttle = LoginThrottle(LIMIT, clock, shared=down, key_prefix="tr-test:login-failures")
    for _ in range(LIMIT - 1):
        throttle.failed(ADDRESS)
    assert throttle.wait_s(ADDRESS) == 0
    clock.now += 20  # past RETRY_S: Redis is asked again, and is still down
    throttle.failed(ADDRESS)
    assert throttle.wait_s(ADDRESS) == pytest.approx(LoginThrottle.WINDOW_S - 20)
    clock.now += LoginThrottle.WINDOW_S
    assert throttle.wait_s(ADDRESS) == 0


def test_redis_answering_nonsense_is_redis_down_until_it_is_asked_again(
    client: redis.Redis, prefix: str
) -> None:
    clock = Seconds()
    throttle, other = process(client, prefix, clock), process(client, prefix)
    client.set(throttle.key(ADDRESS), "not a sorted set")  # WRONGTYPE for the script
    throttle.failed(ADDRESS)
    assert throttle.wait_s(ADDRESS) == 0  # counted here: 1 of 5
    client.delete(throttle.key(ADDRESS))
    for _ in range(LIMIT):
        other.failed(ADDRESS)
    assert other.wait_s(ADDRESS) > 0
    # Until RETRY_S has passed this process does not ask (a hanging Redis would stall it).
    assert throttle.wait_s(ADDRESS) == 0
    clock.now += LoginThrottle.RETRY_S
    assert throttle.wait_s(ADDRESS) > 0


def test_what_redis_says_never_weakens_this_process_count_nor_blocks_past_the_window(
    client: redis.Redis, prefix: str
) -> None:
    throttle = process(client, prefix)
    for _ in range(LIMIT):
        throttle.failed(ADDRESS)
    client.delete(throttle.key(ADDRESS))  # Redis forgets (or is made to)
    assert throttle.wait_s(ADDRESS) == LoginThrottle.WINDOW_S  # this process has not
    assert process(client, prefix).wait_s(ADDRESS) == 0
    # Failures planted far in the future: the wait is still at most the window.
    client.zadd(throttle.key("198.51.100.1"), {f"m{i}": 1e18 for i in range(LIMIT)})
    assert process(client, prefix).wait_s("198.51.100.1") == LoginThrottle.WINDOW_S


def test_sign_ins_begun_in_parallel_in_two_processes_get_past_the_limit_no_more(
    client: redis.Redis, prefix: str
) -> None:
    processes = [process(client, prefix), process(client, prefix)]
    per_process = 4 * LIMIT
    start = threading.Barrier(2 * per_process)

    def begin(throttle: LoginThrottle) -> float:
        start.wait()
        return throttle.begin(ADDRESS).wait_s

    with ThreadPoolExecutor(2 * per_process) as pool:
        waits = list(pool.map(begin, [p for p in processes for _ in range(per_process)]))
    assert sum(1 for wait in waits if wait == 0) == LIMIT, waits
    assert all(0 < wait <= LoginThrottle.WINDOW_S for wait in waits if wait != 0)
    # The refused ones count nowhere: the limit's worth of failures, no more.
    assert client.zcard(processes[0].key(ADDRESS)) == LIMIT


def test_a_sign_in_that_succeeds_no_longer_counts(client: redis.Redis, prefix: str) -> None:
    throttle, other = process(client, prefix), process(client, prefix)
    for _ in range(3 * LIMIT):
        attempt = throttle.begin(ADDRESS)
        assert attempt.wait_s == 0
        throttle.take_back(attempt)
    assert client.zcard(throttle.key(ADDRESS)) == 0
    # Failed ones (never taken back) count, here and for every other process.
    for _ in range(LIMIT):
        assert throttle.begin(ADDRESS).wait_s == 0
    assert throttle.begin(ADDRESS).wait_s > 0
    assert other.begin(ADDRESS).wait_s > 0
    assert client.zcard(throttle.key(ADDRESS)) == LIMIT


def test_with_redis_down_sign_ins_begun_count_in_this_process(free_redis_port: int) -> None:
    clock = Seconds()
    down = redis.Redis(port=free_redis_port, socket_timeout=1, socket_connect_timeout=1)
    throttle = LoginThrottle(LIMIT, clock, shared=down, key_prefix="tr-test:login-failures")
    accepted = throttle.begin(ADDRESS)
    throttle.take_back(accepted)  # Redis down: taken back here, and never raises
    assert [throttle.begin(ADDRESS).wait_s for _ in range(LIMIT)] == [0] * LIMIT
    assert throttle.begin(ADDRESS).wait_s == pytest.approx(LoginThrottle.WINDOW_S)
    clock.now += LoginThrottle.WINDOW_S
    assert throttle.begin(ADDRESS).wait_s == 0


def test_an_ipv6_client_is_counted_by_its_network_and_an_ipv4_one_by_its_address() -> None:
    assert throttled_as("2001:db8:1:2::1") == throttled_as("2001:db8:1:2:ffff::9")
    assert throttled_as("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert throttled_as("2001:db8:1:3::1") != throttled_as("2001:db8:1:2::1")
    assert throttled_as("::ffff:10.7.7.7") == throttled_as("10.7.7.7") == "10.7.7.7"
    assert throttled_as("unknown") == "unknown"
