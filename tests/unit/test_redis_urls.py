"""Redis URLs: plain ones pass through, Sentinel ones carry their primary's name."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from router.cli.up import safe_url
from router.messaging.celery_app import celery_settings, resolve_redis_url
from router.messaging.namespace import Namespace
from router.messaging.redis_clients import (
    RedisUrlError,
    broker_settings,
    redis_client,
    redis_problem,
    sentinel_target,
    with_master,
)
from router.messaging.redis_transport import SENTINEL_TRANSPORT, TRANSPORT
from router.settings import Settings

SENTINELS = "sentinel://:s3cret@10.0.0.1:26379;sentinel://10.0.0.2;sentinel://10.0.0.3:26380/2"


def test_a_sentinel_url_names_every_sentinel_the_database_and_the_primary() -> None:
    target = sentinel_target(with_master(SENTINELS, "main"))
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26380))
    assert (target.master, target.db, target.password) == ("main", 2, "s3cret")


def test_the_primary_name_is_set_once_and_plain_urls_pass_through() -> None:
    once = with_master(SENTINELS, "main")
    assert with_master(once, "other") == SENTINELS + "?master_name=other"
    assert with_master("redis://127.0.0.1:6379/3", "main") == "redis://127.0.0.1:6379/3"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (SENTINELS, "TOOLROUTER_REDIS_SENTINEL_MASTER"),
        ("sentinel://10.0.0.1;redis://10.0.0.2?master_name=m", "starts with sentinel://"),
        ("sentinel://10.0.0.1:port?master_name=m", "port that is not a number"),
        ("sentinel://10.0.0.1/zero?master_name=m", "database of a Sentinel URL is a number"),
        ("sentinel://?master_name=m", "without a host"),
    ],
)
def test_a_sentinel_url_toolrouter_cannot_use_is_named(url: str, message: str) -> None:
    with pytest.raises(RedisUrlError, match=message):
        sentinel_target(url)


def test_celery_gets_kombus_form_and_the_sentinel_transport(tmp_path: Path) -> None:
    settings = Settings(redis_url=SENTINELS, redis_sentinel_master="main", state_dir=tmp_path)
    url = resolve_redis_url(settings)
    assert broker_settings(url) == (SENTINELS, {"master_name": "main"})
    conf = celery_settings(url, Namespace("tr-test"))
    assert conf["broker_url"] == SENTINELS
    assert conf["broker_transport"] == SENTINEL_TRANSPORT
    assert conf["broker_transport_options"]["master_name"] == "main"
    plain = celery_settings("redis://127.0.0.1:6379/0", Namespace("tr-test"))
    assert plain["broker_transport"] == TRANSPORT
    assert "master_name" not in plain["broker_transport_options"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SENTINELS, SENTINELS.replace("s3cret", "***")),
        ("redis://:pw@127.0.0.1:6379/3", "redis://:***@127.0.0.1:6379/3"),
        ("postgresql://me:p@ss@db.example:5432/tr", "postgresql://me:***@db.example:5432/tr"),
        ("sqlite:////srv/state/toolrouter.db", "sqlite:////srv/state/toolrouter.db"),
        ("redis://:pw@[::1:6379/0", "redis://:***@[::1:6379/0"),
        # Characters a password may hold unescaped, as the database and redis-py read it.
        ("postgresql://me:pa;ss@db.example/tr", "postgresql://me:***@db.example/tr"),
        ("postgresql://me:pa/ss@db.example/tr", "postgresql://me:***@db.example/tr"),
        ("postgresql://me:pa#ss@db.example/tr", "postgresql://me:***@db.example/tr"),
        ("redis://:s3cr;et@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),
    ],
)
def test_urls_are_shown_without_their_passwords(url: str, shown: str) -> None:
    """As `up`'s banner and `status` show them; a Sentinel URL is several URLs in one."""
    assert safe_url(url) == shown


def test_no_primary_found_through_sentinels_reads_as_a_sentence() -> None:
    """redis-py's message holds the repr of every client it tried; what each sentinel
    answered is kept (two closed ports here: nothing listens on port 1 or 2)."""
    client = redis_client(
        with_master("sentinel://:pw@127.0.0.1:1;sentinel://127.0.0.1:2/0", "main"),
        socket_timeout=2,
        socket_connect_timeout=2,
    )
    with pytest.raises(redis.exceptions.ConnectionError) as caught:
        client.ping()
    problem = redis_problem(caught.value)
    assert problem.startswith("No master found for 'main' (Error 111 connecting to 127.0.0.1:1")
    assert "127.0.0.1:2. Connection refused.)" in problem
    assert "<redis" not in problem and "pw" not in problem
