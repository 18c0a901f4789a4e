"""A waited call whose accept a database crash undid during the wait (an accept need not
wait for the disk; see the idempotency page): the caller is told to submit it again (503),
never that the call is unknown (404), which would leave it neither run nor resubmitted."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy import delete, select

from router.api.app import create_app
from router.db.schema import calls
from router.dispatch.calls import UNDONE
from router.runtime import Runtime


def newest_call_of(runtime: Runtime, requested_by: str) -> str | None:
    with runtime.store.reading() as conn:
        return conn.execute(
            select(calls.c.id).where(calls.c.requested_by == requested_by).limit(1)
        ).scalar()


def undo(runtime: Runtime, call_id: str) -> None:
    """What a crash leaves of a call whose accept never reached the disk: nothing."""
    with runtime.store.transaction() as conn:
        conn.execute(delete(calls).where(calls.c.id == call_id))


def test_a_waited_call_undone_during_its_wait_is_answered_503_to_submit_again(
    runtime: Runtime,
) -> None:
    app = create_app(runtime)
    key = runtime.keys.create("agent", ["agent"])

    async def submit_and_undo() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            # No worker runs here: the call stays queued while its wait goes on.
            posted = asyncio.create_task(
                client.post(
                    "/v1/calls",
                    json={"tool": "echo", "args": {"n": 1}, "wait_s": 60},
                    headers={"Authorization": f"Bearer {key}"},
                )
            )
            while (call_id := await asyncio.to_thread(newest_call_of, runtime, "agent")) is None:
                assert not posted.done(), posted.result().text
                await asyncio.sleep(0.01)
            await asyncio.to_thread(undo, runtime, call_id)
            return await posted

    response = asyncio.run(submit_and_undo())
    assert response.status_code == 503, response.text
    assert response.json() == {"ok": False, "error": f"unavailable: {UNDONE}"}
