"""Start-up's objects are frozen out of the collector's walks (``router.heap``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from router.api.app import create_app
from router.heap import freeze_start_up_objects
from router.runtime import Runtime


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen, so the suite's heap is collected."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def tracked(thing: object) -> bool:
    """Whether any generation of the collector still walks ``thing``."""
    return any(o is thing for generation in range(3) for o in gc.get_objects(generation))


class Node:
    def __init__(self) -> None:
        self.me = self


def test_objects_alive_at_the_freeze_are_left_out_of_every_collection() -> None:
    built_at_start_up = [Node()]
    assert tracked(built_at_start_up)
    freeze_start_up_objects()
    assert gc.get_freeze_count() > 0
    assert not tracked(built_at_start_up)
    assert not tracked(built_at_start_up[0])


def test_what_is_built_later_is_collected_as_before() -> None:
    freeze_start_up_objects()
    later = Node()
    assert tracked(later)
    gone = weakref.ref(later)
    del later  # a cycle: only the collector frees it
    gc.collect()
    assert gone() is None


def test_start_up_garbage_is_collected_not_frozen() -> None:
    gc.disable()  # so no collection of its own frees the cycle before the freeze
    try:
        garbage = Node()
        gone = weakref.ref(garbage)
        del garbage
        assert gone() is not None
        freeze_start_up_objects()
    finally:
        gc.enable()
    assert gone() is None


def test_the_api_freezes_what_it_built_once_it_is_up(runtime: Runtime) -> None:
    app = create_app(runtime)
    assert gc.get_freeze_count() == 0
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() > 0
        assert not tracked(app)
