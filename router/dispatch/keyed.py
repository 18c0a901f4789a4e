"""Calls already stored under an idempotency key: a retry is answered with its call.

A key names one call of its submitting key for good, so a retry is settled against what is
stored before anything about the call as a new one: its tool first in a capability's
ranking, and its stored answer even where the config would now refuse it as a new call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..db.rows import CallMade, CallRow
from ..db.store import Store
from ..names import echo_name
from ..results import CallResult, Refusal, conflict
from .checks import REUSED, Checked, Refused, digest_of, replay_of, valid_key


@dataclass(frozen=True, slots=True)
class RefusedRetry:
    """A call the checks refuse that may be a retry of a stored call: its key is taken, or
    (in a batch sent again) its index holds a call."""

    tool: str
    digest: str
    idempotency_key: str | None
    refused: Refused

    def retries(self, at_index: CallMade | None, under_key: CallRow | None) -> bool:
        """Whether this is the call stored at its batch index, or else the one stored under
        its key, sent again."""
        made = at_index if at_index is not None else under_key.made if under_key else None
        return made is not None and made.is_call(self.tool, self.digest)


def refused_retry(
    name: object,
    args: object,
    idempotency_key: str | None,
    refused: Refused,
    max_nesting: int,
    *,
    in_batch_sent_again: bool = False,
) -> RefusedRetry | None:
    """``refused`` as a possible retry; None where it cannot be one (no key to look up,
    a malformed one, arguments no stored call has, or too large to have been read)."""
    if not isinstance(name, str) or refused.result.http_status == 413:
        return None
    if idempotency_key is None and not in_batch_sent_again:
        return None
    if idempotency_key is not None and not valid_key(idempotency_key):
        return None
    digest = digest_of(args, max_nesting)
    return None if digest is None else RefusedRetry(name, digest, idempotency_key, refused)


def settle_in_batch(
    stored: CallRow | None, earlier: Checked | None, checked: Checked
) -> str | None:
    """None when a batch's call with a key already used is that same call; else the
    conflict's message. ``earlier``: the call that took the key earlier in the chunk."""
    if stored is not None:
        answer = replay_of(stored, checked)
        return answer.error if answer.status == Refusal.CONFLICT else None
    assert earlier is not None
    if earlier.tool.name != checked.tool.name or earlier.digest != checked.digest:
        return REUSED
    return None


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
        retry = refused_retry(name, args, idempotency_key, refused, self.max_nesting)
        if retry is None or retry.idempotency_key is None:
            return None
        existing = self.stored(requested_by, retry.idempotency_key)
        if existing is None:
            return None
        if retry.retries(None, existing):
            return existing.result()
        return conflict(REUSED, tool=echo_name(name))

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
        call itself, for a retry of it (its tool may no longer take the arguments). A tool
        the ranking no longer holds made another request's call, as far as can be told."""
        if idempotency_key is None or not valid_key(idempotency_key):
            return list(ranked)  # a malformed key is refused by ``submit``, unread
        existing = self.stored(requested_by, idempotency_key)
        if existing is None or existing.tool not in ranked:
            return list(ranked)
        if existing.made.is_call(existing.tool, digest_of(args, self.max_nesting)):
            return existing.result()
        return [existing.tool, *(name for name in ranked if name != existing.tool)]
