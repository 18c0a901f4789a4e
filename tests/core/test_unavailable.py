"""A database or broker that is down gives ``unavailable`` values, and loses nothing."""

from __future__ import annotations

from sqlalchemy import select

from router.cli.privredis import free_port
from router.db.engine import make_engine
from router.db.schema import audit_log
from router.db.store import Store
from router.dispatch.dispatcher import Dispatcher
from router.messaging.celery_app import make_celery
from router.messaging.publisher import Publisher
from router.runtime import Runtime


def test_a_broker_that_is_down_fails_the_call_instead_of_running_it_later(
    runtime: Runtime,
) -> None:
    dead = Publisher(make_celery(f"redis://127.0.0.1:{free_port()}/0", runtime.namespace))
    dispatcher = Dispatcher(
        runtime.store, runtime.registry, dead, runtime.audit, runtime.keyring, clock=runtime.clock
    )
    result = dispatcher.submit("agent", "echo", {"x": 1})
    assert result.http_status == 503
    body = result.to_dict()
    assert body["ok"] is False and body["error"].startswith("unavailable: broker: ")
    with runtime.store.reading() as conn:
        rows = conn.execute(select(audit_log.c.event, audit_log.c.call_id)).all()
    # The call was stored, then failed on the spot: nothing is left to run behind the
    # caller's back, and the log says both things.
    assert [row.event for row in rows] == ["queued", "error"]
    call = runtime.calls.read(rows[0].call_id)
    assert call.status == "failed" and call.error is not None
    assert call.error.startswith("unavailable: broker: ")


def test_a_database_that_is_down_gives_unavailable_not_an_exception(runtime: Runtime) -> None:
    port = free_port()
    engine = make_engine(f"postgresql://postgres@127.0.0.1:{port}/nothing")
    dispatcher = Dispatcher(
        Store(engine),
        runtime.registry,
        runtime.publisher,
        runtime.audit,
        runtime.keyring,
        clock=runtime.clock,
    )
    for tool, args in [("echo", {}), ("no-such-tool", {}), ("strict", {"to": 1})]:
        result = dispatcher.submit("agent", tool, args)
        assert result.http_status == 503
        assert result.to_dict()["error"].startswith("unavailable: database: ")
    engine.dispose()


def test_an_idempotency_key_is_free_again_after_a_503(runtime: Runtime) -> None:
    dead = Publisher(make_celery(f"redis://127.0.0.1:{free_port()}/0", runtime.namespace))
    down = Dispatcher(
        runtime.store, runtime.registry, dead, runtime.audit, runtime.keyring, clock=runtime.clock
    )
    assert down.submit("agent", "echo", {"x": 1}, "key-1").http_status == 503
    # The retry the caller was invited to make creates the call, it does not replay the 503.
    retry = runtime.dispatcher.submit("agent", "echo", {"x": 1}, "key-1")
    assert retry.status == "queued" and retry.http_status == 200
