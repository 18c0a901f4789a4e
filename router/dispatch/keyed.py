"""Calls already stored under an idempotency key: a retry is answered with its call.

A key names one call of its submitting key for good, so a retry is settled against what is
stored before anything about the call as a new one: its tool first in a capability's
ranking, and its stored answer even where the config would now refuse it as a new call.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..db.rows import CallRow
from ..db.store import Store
from ..names import echo_name
from ..results import CallResult, conflict
from .checks import Checked, Refused, digest_of, replay_of, valid_key


class KeyedCalls:
    """Looks calls up by their submitter's idempotency key."""

    def __init__(self, store: Store, max_nesting: int) -> None:
        self.store, self.max_nesting = store, max_nesting

    def stored(self, requested_by: str, idempotency_key: str) -> CallRow | None:
        with self.store.reading() as conn:
            return self.store.find_by_idempotency_key(conn, requested_by, idempotency_key)

    def replay(self, requested_by: str, checked: Checked) -> CallResult | None:
        """The answer for a key already used by ``requested_by`` (the call, or a 409)."""
        assert checked.idempotency_key is not None
        existing = self.stored(requested_by, checked.idempotency_key)
        return None if existing is None else replay_of(existing, checked)

    def retry_of_refused(
        self,
        requested_by: str,
        name: object,
        args: object,
        idempotency_key: str | None,
        refused: Refused,
    ) -> CallResult | None:
        """The answer to a keyed call the checks refuse when its key is already taken: the
        stored call for a retry of it (its tool may have left the config, its schema or its
        rules changed since it was accepted), a 409 for another call; else None."""
        if (
            idempotency_key is None
            or not valid_key(idempotency_key)
            or not isinstance(name, str)
            or refused.result.http_status == 413
        ):
            return None
        existing = self.stored(requested_by, idempotency_key)
        if existing is None:
            return None
        if existing.tool == name and existing.args_sha256 == digest_of(args, self.max_nesting):
            return existing.result()
        return conflict("idempotency key reused with different arguments", tool=echo_name(name))

    def capability_order(
        self,
        requested_by: str,
        ranked: Sequence[str],
        args: object,
        idempotency_key: str | None,
    ) -> list[str] | CallResult:
        """``ranked`` with the tool of the call already stored under the key first, so a
        retry of a call by capability finds its call even after success rates have
        reordered the ranking, rather than a 409 for the very request that made it; or that
        call itself, for a retry of it whose tool has since left the ranking."""
        if idempotency_key is None or not valid_key(idempotency_key):
            return list(ranked)  # a malformed key is refused by ``submit``, unread
        existing = self.stored(requested_by, idempotency_key)
        if existing is None:
            return list(ranked)
        if existing.tool in ranked:
            return [existing.tool, *(name for name in ranked if name != existing.tool)]
        if existing.args_sha256 == digest_of(args, self.max_nesting):
            return existing.result()
        return list(ranked)
