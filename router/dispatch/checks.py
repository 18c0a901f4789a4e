"""Every check on a call that needs no database: the tool, its arguments, the key's shape.

Shared by single and bulk submission, so both refuse exactly the same calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ..audit import entries
from ..audit.log import AuditEntry
from ..canonical import (
    args_digest,
    canonical_json,
    nested_deeper_than,
    sha256_hex,
    too_deep_message,
)
from ..db.rows import CallRow
from ..names import echo_name
from ..results import CallResult, bad_request, conflict, error_message, rejected
from ..status import AuditEvent, CallStatus
from ..tools.registry import Tool, ToolRegistry
from .gate import RolesOf, Ruling, rule_on

IDEMPOTENCY_KEY_MAX = 256
REUSED = "idempotency key reused with different arguments"
TOO_LARGE = "arguments too large: "


@dataclass(frozen=True, slots=True)
class Checked:
    """A call that passed every check: its tool, its arguments in canonical form, and what
    the tool's rules say of it (``router.dispatch.gate``)."""

    tool: Tool
    canonical: str
    digest: str
    idempotency_key: str | None
    ruling: Ruling


@dataclass(frozen=True, slots=True)
class Refused:
    """A call refused before storage. ``audit`` is set for rejections (unknown tool, invalid
    arguments), which are audited; malformed requests (413, 422) are not attempts."""

    result: CallResult
    audit: AuditEntry | None = None


@dataclass(frozen=True, slots=True)
class EditRefused:
    """An approver's edit of a call's arguments that a submission of them would not pass."""

    http_status: int
    error: str


class Checks:
    """The checks, with the limits they apply."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        max_args_bytes: int,
        max_nesting: int,
        roles_of: RolesOf = lambda name: (),
    ) -> None:
        self.registry, self.roles_of = registry, roles_of
        self.max_args_bytes, self.max_nesting = max_args_bytes, max_nesting

    def check(
        self, requested_by: str, name: object, args: object, idempotency_key: str | None
    ) -> Checked | Refused:
        """Every check that needs no database: the tool, the arguments, the key's shape.

        Shared by single and bulk submission, so both refuse exactly the same calls.
        """
        tool = self.registry.get(name)
        if tool is None:
            label = echo_name(name)
            refused = rejection(requested_by, label, AuditEvent.UNKNOWN, f"unknown tool: {label}")
            if not isinstance(name, str):
                return refused
            hint = tuple(self.registry.similar_names(name))
            return Refused(replace(refused.result, did_you_mean=hint), refused.audit)
        problem, canonical = self._check_arguments(tool, args)
        if problem is not None and problem.startswith(TOO_LARGE):
            return Refused(bad_request(problem, tool=tool.name, http_status=413))
        if problem is not None:
            return rejection(
                requested_by, tool.name, AuditEvent.INVALID, f"invalid arguments: {problem}"
            )
        assert canonical is not None
        if idempotency_key is not None and not valid_key(idempotency_key):
            return Refused(
                bad_request(
                    f"idempotency key must be 1-{IDEMPOTENCY_KEY_MAX} printable characters",
                    tool=tool.name,
                )
            )
        ruling = rule_on(tool, args, requested_by, self.roles_of)
        if ruling.denial is not None:
            return denial(requested_by, tool.name, ruling)
        return Checked(tool, canonical, sha256_hex(canonical), idempotency_key, ruling)

    def check_edit(self, requested_by: str, tool: str, args: object) -> Checked | EditRefused:
        """An approver's edit of ``requested_by``'s call of ``tool``, checked as a submission
        of those arguments would be. The API checks an edit before sending it; the approval
        worker checks it again where it applies it."""
        if self.registry.get(tool) is None:
            # As the approval worker answers any decision on such a request.
            return EditRefused(409, f"tool {tool} is no longer registered")
        checked = self.check(requested_by, tool, args, None)
        if isinstance(checked, Refused):
            status = 413 if checked.result.http_status == 413 else 422
            return EditRefused(status, f"edited arguments refused: {checked.result.error}")
        return checked

    def _check_arguments(self, tool: Tool, args: object) -> tuple[str | None, str | None]:
        if not isinstance(args, dict):
            return "arguments must be a JSON object", None
        if nested_deeper_than(args, self.max_nesting):
            # Before anything walks them recursively: serializing, validating, storing.
            return too_deep_message("arguments", self.max_nesting), None
        try:
            canonical = canonical_json(args)
        except (TypeError, ValueError) as exc:
            return f"arguments are not JSON: {error_message(exc)}", None
        # Measured as UTF-8, not as the ASCII-escaped stored form, so non-ASCII text is not
        # counted up to six times over. The escaped canonical form is never shorter than the
        # UTF-8 text, and the measured form adds at most one space per separator, so small
        # arguments skip the second serialization.
        if 2 * len(canonical) > self.max_args_bytes:
            size = len(json.dumps(args, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if size > self.max_args_bytes:
                return f"{TOO_LARGE}{size} bytes, over the limit of {self.max_args_bytes}", None
        return tool.argument_errors(args), canonical


def valid_key(key: str) -> bool:
    """Whether an idempotency key may be stored and looked up: 1 to ``IDEMPOTENCY_KEY_MAX``
    printable characters (a NUL or lone surrogate no database stores)."""
    return 0 < len(key) <= IDEMPOTENCY_KEY_MAX and key.isprintable()


def digest_of(args: object, max_nesting: int) -> str | None:
    """The argument digest a stored call of ``args`` carries; None where no call of them
    could have been stored (not an object, too deep, not JSON)."""
    if not isinstance(args, dict) or nested_deeper_than(args, max_nesting):
        return None
    try:
        return args_digest(args)
    except (TypeError, ValueError):
        return None


def replay_of(existing: CallRow, checked: Checked) -> CallResult:
    """The answer to a call whose idempotency key is already taken by ``existing``."""
    if not existing.made.is_call(checked.tool.name, checked.digest):
        return conflict(REUSED, tool=checked.tool.name)
    return existing.result()


def denial(actor: str, tool: str, ruling: Ruling) -> Refused:
    """A call its tool's ``deny_if`` refuses: ``denied``, never stored, audited ``denied``."""
    error = ruling.denial or ""
    rule = "; ".join(r.why for r in ruling.rules)
    return Refused(
        CallResult(status=CallStatus.DENIED, tool=tool, error=error),
        entries.refused(actor=actor, tool=tool, event=AuditEvent.DENIED, error=error, rule=rule),
    )


def rejection(actor: str, tool: str, event: AuditEvent, error: str) -> Refused:
    return Refused(
        rejected(tool, error),
        entries.refused(actor=actor, tool=tool, event=event, error=error),
    )
