"""The MCP server's state that every API process shares, on real Redis: which call a
cancelled request made (``CallsInFlight``) and the log level each key set (``LogLevels``)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import anyio
import pytest
import redis

from router.errors import Unavailable
from router.mcp.call_reports import CallReports, LogLevels, allows
from router.mcp.calls_in_flight import FORGET_AFTER_S, CallsInFlight
from router.messaging.namespace import Namespace

from ..support import services
from ..support.launcher import free_port
from ..support.waiting import wait_for

NAMESPACE = Namespace("tr-mcp-state")


@pytest.fixture
def client(redis_base: str) -> Iterator[redis.Redis]:
    url = f"{redis_base}/{services.REDIS_DBS['unit']}"
    services.flush(url)
    the_client = redis.Redis.from_url(url)
    yield the_client
    the_client.close()
    services.flush(url)


@pytest.fixture
def down() -> Iterator[redis.Redis]:
    """A client of a Redis that is not there: nothing listens on its port."""
    the_client = redis.Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_timeout=1, socket_connect_timeout=1
    )
    yield the_client
    the_client.close()


# -- calls in flight ----------------------------------------------------------------------


def test_a_cancel_finds_the_call_of_that_key_and_that_id_only(client: redis.Redis) -> None:
    calls = CallsInFlight(client, NAMESPACE)
    calls.add("a", 7, "call_1")
    calls.add("b", 7, "call_2")
    calls.add("a", "7", "call_3")
    # Another process's view of the same Redis: the same entries.
    other = CallsInFlight(client, NAMESPACE)
    assert other.take("a", 7) == "call_1"
    assert calls.take("a", 7) is None  # taken once
    assert calls.take("a", "7") == "call_3"
    assert calls.take("c", 7) is None
    # Another deployment sharing the Redis sees none of them.
    assert CallsInFlight(client, Namespace("tr-other")).take("b", 7) is None
    assert calls.take("b", 7) == "call_2"
    assert client.keys("*") == []


def test_an_answered_request_no_longer_names_its_call_and_a_shared_id_is_ambiguous(
    client: redis.Redis,
) -> None:
    calls = CallsInFlight(client, NAMESPACE)
    calls.add("a", 1, "call_1")
    calls.done("a", 1, "call_1")
    assert calls.take("a", 1) is None
    calls.add("a", 2, "call_2")
    calls.add("a", 2, "call_3")
    assert calls.take("a", 2) is None
    # Ambiguous stays ambiguous; once one of them is answered the other is found.
    assert calls.take("a", 2) is None
    calls.done("a", 2, "call_2")
    assert calls.take("a", 2) == "call_3"


def test_names_in_redis_are_bounded_whatever_the_request_id(client: redis.Redis) -> None:
    calls = CallsInFlight(client, NAMESPACE)
    long_id = "x" * 100_000
    calls.add("a" * 128, long_id, "call_1")
    (name,) = client.keys("*")
    assert isinstance(name, bytes) and name.startswith(NAMESPACE.prefix.encode())
    assert len(name) < 100
    assert calls.take("a" * 128, long_id) == "call_1"


def test_an_entry_is_forgotten_after_its_time(client: redis.Redis) -> None:
    calls = CallsInFlight(client, NAMESPACE, forget_after_s=0.2)
    calls.add("a", 1, "call_1")
    assert 0 < client.pttl(calls._name("a", 1)) <= 200
    wait_for(lambda: not client.exists(calls._name("a", 1)), 30, "the entry forgotten")
    assert calls.take("a", 1) is None
    # The default keeps an entry FORGET_AFTER_S.
    default = CallsInFlight(client, NAMESPACE)
    default.add("a", 2, "call_2")
    assert (
        FORGET_AFTER_S * 1000 - 60_000 < client.pttl(default._name("a", 2)) <= FORGET_AFTER_S * 1000
    )


def test_an_old_entry_goes_on_its_own_though_the_id_was_used_since(client: redis.Redis) -> None:
    """A client that gives every request the same id leaves no stale entry behind that
    would make each later cancel ambiguous."""
    calls = CallsInFlight(client, NAMESPACE)
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    # An entry added FORGET_AFTER_S and more ago (its handler went away unanswered).
    client.zadd(calls._name("a", 1), {"call_old": now_ms - FORGET_AFTER_S * 1000 - 1})
    calls.add("a", 1, "call_new")
    assert calls.take("a", 1) == "call_new"


def test_with_redis_down_nothing_is_remembered_and_nothing_raises(down: redis.Redis) -> None:
    calls = CallsInFlight(down, NAMESPACE)
    calls.add("a", 1, "call_1")
    calls.done("a", 1, "call_1")
    assert calls.take("a", 1) is None


# -- log levels -----------------------------------------------------------------------


def test_a_level_set_holds_for_the_key_in_every_process(client: redis.Redis) -> None:
    levels = LogLevels(client, NAMESPACE)
    assert levels.get("a") is None
    levels.set("a", "warning")
    assert LogLevels(client, NAMESPACE).get("a") == "warning"
    assert levels.get("b") is None
    assert LogLevels(client, Namespace("tr-other")).get("a") is None
    levels.set("a", "debug")
    assert levels.get("a") == "debug"
    assert 23 * 3600_000 < client.pttl(levels._name("a")) <= 24 * 3600_000


def test_a_level_is_kept_for_its_time_from_the_last_set(client: redis.Redis) -> None:
    levels = LogLevels(client, NAMESPACE, keep_s=0.2)
    levels.set("a", "info")
    assert 0 < client.pttl(levels._name("a")) <= 200
    wait_for(lambda: levels.get("a") is None, 30, "the level forgotten")


def test_a_level_that_is_not_one_is_no_level(client: redis.Redis) -> None:
    levels = LogLevels(client, NAMESPACE)
    client.set(levels._name("a"), "everything")
    assert levels.get("a") is None
    client.set(levels._name("a"), b"\xff\xfe")
    assert levels.get("a") is None


def test_allows_messages_at_or_above_the_level_asked_for() -> None:
    assert not allows(None, "emergency")
    assert allows("warning", "warning") and allows("warning", "error")
    assert not allows("warning", "notice")


def test_with_redis_down_no_level_is_read_and_setting_one_is_unavailable(
    down: redis.Redis,
) -> None:
    levels = LogLevels(down, NAMESPACE)
    assert levels.get("a") is None
    with pytest.raises(Unavailable, match="redis"):
        levels.set("a", "debug")


def test_a_call_reads_the_level_once_and_only_where_the_protocol_has_logging(
    client: redis.Redis,
) -> None:
    levels = LogLevels(client, NAMESPACE)
    levels.set("a", "info")

    def ctx(version: str) -> SimpleNamespace:
        return SimpleNamespace(meta=None, protocol_version=version)

    async def scenario() -> None:
        handshake = await CallReports.start(ctx("2025-11-25"), "a", levels)
        assert (handshake.logs, handshake.level) == (True, "info")
        modern = await CallReports.start(ctx("2026-07-28"), "a", levels)
        assert (modern.logs, modern.level) == (False, None)
        down = await CallReports.start(
            ctx("2025-11-25"), "a", LogLevels(redis.Redis(port=free_port()), NAMESPACE)
        )
        assert down.level is None

    anyio.run(scenario)
