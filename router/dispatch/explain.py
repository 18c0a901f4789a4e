"""A dry run (``"dry_run": true``): what submitting a call would do, done by none of it.

Each answer comes from the code a submission runs: the dispatcher's checks, its replay
of an idempotency key, its choice by capability, the approval gate (``gate``), and the
rate limit and result cache a worker consults (``router.messaging.policies``), asked
without taking a token. Nothing is stored, published, audited or run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

from ..errors import Unavailable
from ..messaging.namespace import Namespace
from ..messaging.policies import Limiter, ResultCache, fallback_chain
from ..names import echo_name
from ..results import CallResult, unavailable
from ..tools.registry import Tool
from ..tools.routing import Candidate
from .checks import Checked, Refused
from .dispatcher import Choice, Dispatcher
from .gate import why_not_fallback

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    """What a submission would do: ``outcome`` of a dry run."""

    QUEUED = "queued"
    PENDING = "pending"
    REPLAYED = "replayed"
    REFUSED = "refused"


class Explainer:
    """Answers dry runs for one process, with the dispatcher's own checks."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        limiter: Limiter,
        cache: ResultCache,
        namespace: Namespace,
    ) -> None:
        self.dispatcher, self.limiter, self.cache = dispatcher, limiter, cache
        self.namespace = namespace

    def explain(
        self, requested_by: str, tool: object, args: object, idempotency_key: str | None
    ) -> dict[str, Any] | CallResult:
        """The explanation of a call by tool name; a 503 ``CallResult`` when the database or
        Redis cannot say. Never raises."""
        return self._guarded(
            echo_name(tool), lambda: self._explain(requested_by, tool, args, idempotency_key)
        )

    def explain_by_capability(
        self,
        requested_by: str,
        capability: str,
        ranked: Sequence[Candidate],
        args: object,
        idempotency_key: str | None,
    ) -> dict[str, Any] | CallResult:
        """The explanation of a call by capability, with the ranking it is chosen from."""

        def run() -> dict[str, Any]:
            ordered = self.dispatcher.keyed.capability_order(
                requested_by, [c.tool for c in ranked], args, idempotency_key
            )
            if isinstance(ordered, CallResult):
                about = {"name": capability, "ranking": [c.to_dict() for c in ranked]}
                return {**_replayed(ordered), "capability": about}
            chosen = self.dispatcher.choose_by_capability(requested_by, capability, ordered, args)
            usable = chosen.usable if isinstance(chosen, Choice) else ()
            about = {
                "name": capability,
                "ranking": [{**c.to_dict(), "takes_args": c.tool in usable} for c in ranked],
            }
            if isinstance(chosen, Refused):
                return {**_refused(None, chosen.result), "capability": about}
            explained = self._explain(
                requested_by, chosen.tool, args, idempotency_key, chain=chosen.chain
            )
            return {**explained, "capability": about}

        return self._guarded(None, run)

    def _guarded(
        self, tool: str | None, run: Callable[[], dict[str, Any]]
    ) -> dict[str, Any] | CallResult:
        try:
            answer = run()
        except Unavailable as exc:
            return unavailable(str(exc), tool=tool)
        except Exception:
            log.exception("dry run failed unexpectedly")
            return unavailable("internal error", tool=tool)
        return answer

    def _explain(
        self,
        requested_by: str,
        name: object,
        args: object,
        idempotency_key: str | None,
        *,
        chain: Sequence[str] = (),
    ) -> dict[str, Any]:
        checked = self.dispatcher.check(requested_by, name, args, idempotency_key)
        if isinstance(checked, Refused):
            replay = self.dispatcher.keyed.retry_of_refused(
                requested_by, name, args, idempotency_key, checked
            )
            # Its audit entry is dropped: a dry run is not an attempt on the tool.
            refused = checked.result if replay is None else replay
            return _replayed(refused) if refused.call_id else _refused(refused.tool, refused)
        if idempotency_key is not None:
            replay = self.dispatcher.keyed.replay(requested_by, checked)
            if replay is not None and replay.call_id is None:
                return _refused(checked.tool.name, replay)  # a key reused with other arguments
            if replay is not None:
                return _replayed(replay)
        return self._would_accept(requested_by, checked, args, chain)

    def _would_accept(
        self, requested_by: str, checked: Checked, args: object, chain: Sequence[str]
    ) -> dict[str, Any]:
        tool = checked.tool
        gate = checked.ruling.gate
        answer = _blank(tool.name, Outcome.QUEUED if gate is None else Outcome.PENDING)
        answer["queue"] = {"name": tool.queue, "key": self.namespace.prefix + tool.queue}
        answer["approval"] = {
            "required": gate is not None,
            "approvers": list(gate.approvers) if gate else [],
            "approvals_required": gate.approvals_required if gate else 0,
            "timeout_s": gate.timeout_s if gate else None,
            "rules": [rule.to_dict() for rule in checked.ruling.rules],
        }
        rate = self.limiter.peek(tool)
        if rate is not None:
            answer["rate_limit"] = {
                "limit": rate.limit,
                "capacity": rate.capacity,
                "remaining": rate.remaining,
                "passes_now": rate.wait_s == 0,
                "wait_s": rate.wait_s,
            }
        if tool.spec.cache_ttl_s > 0:
            hit = self.cache.get(tool, checked.digest) is not None
            answer["cache"] = {"ttl_s": tool.spec.cache_ttl_s, "hit": hit}
        answer["fallbacks"], answer["fallbacks_not_tried"] = self._fallbacks(
            requested_by, tool, args, chain
        )
        return answer

    def _fallbacks(
        self, requested_by: str, tool: Tool, args: object, chain: Sequence[str]
    ) -> tuple[list[str], list[dict[str, str]]]:
        """The chain a failed call would fall back along, split as the worker would take
        it: tools it would try, and those it would skip for these arguments, with why."""
        tried: list[str] = []
        not_tried: list[dict[str, str]] = []
        for fallback in fallback_chain(self.dispatcher.registry, tool, chain):
            why = why_not_fallback(fallback, args, requested_by, self.dispatcher.roles_of)
            if why is None:
                tried.append(fallback.name)
            else:
                not_tried.append({"tool": fallback.name, "why": why})
        return tried, not_tried


def _blank(tool: str | None, outcome: Outcome) -> dict[str, Any]:
    """Every field of an explanation, each empty until something fills it."""
    return {
        "ok": True,
        "dry_run": True,
        "outcome": str(outcome),
        "tool": tool,
        "capability": None,
        "refused": None,
        "replay": None,
        "queue": None,
        "approval": None,
        "rate_limit": None,
        "cache": None,
        "fallbacks": [],
        "fallbacks_not_tried": [],
    }


def _replayed(stored: CallResult) -> dict[str, Any]:
    return {**_blank(stored.tool, Outcome.REPLAYED), "replay": stored.to_dict()}


def _refused(tool: str | None, result: CallResult) -> dict[str, Any]:
    refusal = {
        "status": str(result.status),
        "http_status": result.http_status,
        "error": result.error,
        "did_you_mean": list(result.did_you_mean),
    }
    return {**_blank(tool, Outcome.REFUSED), "refused": refusal}
