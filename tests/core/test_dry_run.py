"""A dry run whose Redis does not answer: a 503 value, never an exception, as a submission's."""

from __future__ import annotations

import redis

from router.dispatch.checks import Refused
from router.dispatch.explain import Explainer
from router.messaging.policies import Limiter, ResultCache
from router.results import CallResult
from router.runtime import Runtime

from ..support.launcher import free_port


def test_a_dry_run_without_redis_is_unavailable_and_a_cache_that_is_down_a_miss(
    runtime: Runtime,
) -> None:
    # A port nothing listens on: a real Redis client, refused at connect.
    dead = redis.Redis(port=free_port(), socket_connect_timeout=1, socket_timeout=1)
    explainer = Explainer(
        runtime.dispatcher,
        Limiter(dead, runtime.namespace),
        ResultCache(dead, runtime.namespace, runtime.keyring),
        runtime.namespace,
    )
    limited = explainer.explain("agent", "limited_ledger", {"path": "x"}, None)
    assert isinstance(limited, CallResult)
    assert limited.http_status == 503
    assert limited.to_dict()["error"].startswith("unavailable: redis: ")
    cached = explainer.explain("agent", "cached_ledger", {"path": "x"}, None)
    assert isinstance(cached, dict)
    assert cached["cache"] == {"ttl_s": 60.0, "hit": False}


def test_a_capability_whose_tools_take_none_of_the_arguments_says_so(runtime: Runtime) -> None:
    """Told apart from a capability no tool declares: the arguments are what to change."""
    refused = runtime.dispatcher.choose_by_capability("agent", "pay", ["strict"], {"to": 1})
    assert isinstance(refused, Refused)
    assert refused.result.error == "no tool with capability pay takes these arguments"
    refused = runtime.dispatcher.choose_by_capability("agent", "pay", [], {"to": 1})
    assert isinstance(refused, Refused)
    assert refused.result.error == "no tool declares capability pay"
