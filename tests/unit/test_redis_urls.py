"""Redis URLs: plain ones pass through, Sentinel ones carry their primary's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.messaging.celery_app import celery_settings, resolve_redis_url
from router.messaging.namespace import Namespace
from router.messaging.redis_clients import (
    RedisUrlError,
    broker_settings,
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
