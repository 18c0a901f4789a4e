"""The API's cache of keys (router.auth.key_cache): fast for a known key, never a way back in
for a revoked one. The cache's own rules are pure logic; revocation is checked through
the real API process, Redis and the database."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from sqlalchemy import update

from router.auth.key_cache import Acknowledged, PrincipalCache
from router.auth.principal import Principal
from router.db.schema import api_keys
from router.runtime import Runtime

from ..support.stack import Stack

AGENT = Principal(name="a", roles=frozenset({"agent"}))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_for_its_ttl_only() -> None:
    clock = FakeClock()
    cache = PrincipalCache(ttl_s=5.0, clock=clock)
    cache.resume()
    cache.put("d", AGENT, generation=cache.generation)
    assert cache.get("d") == AGENT
    clock.now += 4.9
    assert cache.get("d") == AGENT
    clock.now += 0.2
    assert cache.get("d") is None


def test_a_lookup_begun_before_an_emptying_is_not_kept() -> None:
    cache = PrincipalCache()
    cache.resume()
    begun = cache.generation  # a request starts reading the key's row
    cache.clear()  # a revocation is heard meanwhile
    cache.put("d", AGENT, generation=begun)
    assert cache.get("d") is None
    cache.put("d", AGENT, generation=cache.generation)
    assert cache.get("d") == AGENT


def test_only_a_cache_that_can_hear_revocations_keeps_anything() -> None:
    """Suspended (the listener is not subscribed: from the start, and after it loses
    Redis) it keeps nothing; resumed, it starts empty."""
    cache = PrincipalCache()
    cache.put("d", AGENT, generation=cache.generation)
    assert cache.get("d") is None
    cache.resume()
    cache.put("d", AGENT, generation=cache.generation)
    assert cache.get("d") == AGENT
    cache.suspend()
    assert cache.get("d") is None
    cache.put("d", AGENT, generation=cache.generation)
    cache.resume()
    assert cache.get("d") is None


def test_a_full_cache_starts_over_rather_than_growing() -> None:
    cache = PrincipalCache(max_entries=3)
    cache.resume()
    for digest in "abcd":
        cache.put(digest, AGENT, generation=cache.generation)
    assert [cache.get(d) for d in "abcd"] == [None, None, None, AGENT]


@contextmanager
def new_key(stack: Stack, runtime: Runtime) -> Iterator[tuple[str, httpx.Client]]:
    """A fresh agent and operator key, already used once (so the API has it cached)."""
    name = f"cached-{uuid.uuid4().hex[:12]}"
    token = runtime.keys.create(name, ["agent", "operator"])
    with httpx.Client(
        base_url=stack.base_url, headers={"authorization": f"Bearer {token}"}
    ) as http:
        assert http.get("/v1/tools").status_code == 200
        yield name, http


def test_a_revocation_is_confirmed_by_the_api_before_it_returns(stack: Stack) -> None:
    """The API has the key cached; revoking waits for its confirmation, so the very next
    request is refused, many times over (a race would let one through now and then)."""
    runtime = Runtime(stack.settings)
    try:
        for _ in range(10):
            with new_key(stack, runtime) as (name, http):
                assert http.get("/v1/tools").status_code == 200  # from the cache
                runtime.keys.revoke(name)
                response = http.get("/v1/tools")
                assert response.status_code == 401, response.text
                assert response.json() == {"ok": False, "error": "key revoked"}
    finally:
        runtime.close()


def test_every_listening_api_process_acknowledges(stack: Stack) -> None:
    runtime = Runtime(stack.settings)
    notifier = runtime.notifier()
    try:
        # This stack's API; other deployments on this Redis have their own channel and key.
        assert notifier.keys_changed() == Acknowledged(listening=1, heard=1)
    finally:
        notifier.client.close()
        runtime.close()


def test_a_known_key_is_answered_from_the_cache_until_it_is_emptied(stack: Stack) -> None:
    """Proof the cache is used: with the key's row changed behind the API's back, the key
    still works from the cache; once the cache is emptied, the database decides."""
    runtime = Runtime(stack.settings)
    notifier = runtime.notifier()
    try:
        with new_key(stack, runtime) as (name, http):
            with runtime.store.transaction() as conn:
                conn.execute(
                    update(api_keys).where(api_keys.c.name == name).values(token_hash="0" * 64)
                )
            assert http.get("/v1/tools").status_code == 200
            assert notifier.keys_changed().heard >= 1
            response = http.get("/v1/tools")
            assert response.status_code == 401
            assert response.json() == {"ok": False, "error": "invalid key"}
    finally:
        notifier.client.close()
        runtime.close()


def test_two_authorization_headers_are_refused_even_with_a_known_key_first(
    stack: Stack,
) -> None:
    """A proxy and the API may each read another of the two: neither counts, from the cache
    or from the database."""
    known = f"Bearer {stack.keys['agent']}"
    for pair in ([known, "Bearer nope"], ["Bearer nope", known], [known, known]):
        headers = httpx.Headers([("Authorization", value) for value in pair])
        response = httpx.get(f"{stack.base_url}/v1/tools", headers=headers)
        assert response.status_code == 401, (pair, response.text)
        assert response.json() == {"ok": False, "error": "more than one Authorization header"}
    alone = httpx.get(f"{stack.base_url}/v1/tools", headers={"Authorization": known})
    assert alone.status_code == 200
