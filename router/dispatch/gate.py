"""Whether a call waits for approval, from whom, and which rule says so.

The dispatcher issues a request from this answer and a dry run explains it, so the two
never disagree. Each rule that gates a call names itself (``GateRule``): the tool's own
config (``risk`` or ``requires_approval: true``), or, for a tool with rules over its
arguments (``router.tools.rules``), each condition that decided, with its text.

Conditions fail closed: one that cannot be evaluated gates the call (``deny_if`` too: a
person decides instead of the rule), and the request says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..tools.registry import Tool
from ..tools.rules import Condition, Context, RuleError, ToolRules, context_of

TOOL_CONFIG = "tool_config"
CONDITION = "condition"
DENIED_BY_RULE = "denied by rule deny_if: "

RolesOf = Callable[[str], Iterable[str]]


@dataclass(frozen=True, slots=True)
class GateRule:
    """One rule that gates a call: its kind, its name, and why it applies."""

    kind: str
    name: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "why": self.why}


@dataclass(frozen=True, slots=True)
class Gate:
    """The approval a gated call needs: who decides, how many, for how long, and why."""

    approvers: tuple[str, ...]
    approvals_required: int
    timeout_s: float
    rules: tuple[GateRule, ...]

    @property
    def rule_text(self) -> str:
        """What the request stores, seals and shows: every rule that gated it, in order."""
        return "; ".join(rule.why for rule in self.rules)


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the rules say of one call: refused (``denial``), gated (``gate``) or neither;
    ``rules`` are those that decided, an ungated call's conditions included."""

    gate: Gate | None
    rules: tuple[GateRule, ...] = ()
    denial: str | None = None


def gate_of(tool: Tool) -> Gate | None:
    """The approval a call of ``tool`` needs by its config alone (no conditions)."""
    spec = tool.spec
    if not spec.gated:
        return None
    assert isinstance(spec.approvals_required, int)
    return Gate(
        approvers=spec.approvers,
        approvals_required=spec.approvals_required,
        timeout_s=spec.approval_timeout_s,
        rules=(GateRule(TOOL_CONFIG, tool.name, _static_why(tool)),),
    )


def rule_on(tool: Tool, args: Any, caller: str, roles_of: RolesOf) -> Ruling:
    """What the rules say of this call; evaluates only a tool that has conditions."""
    rules = tool.rules
    if rules is None:
        gate = gate_of(tool)
        return Ruling(gate, gate.rules if gate else ())
    context = context_of(args, caller, roles_of(caller) if rules.uses_roles else (), rules.reads)
    return _evaluate(tool, rules, context)


def why_not_fallback(tool: Tool, args: Any, caller: str, roles_of: RolesOf) -> str | None:
    """Why ``tool`` must not answer a failed call as its fallback, if it must not: these
    arguments are invalid for it, its ``deny_if`` holds, or its rules would gate them (or
    cannot read them), and a fallback has no approval of its own. The worker skips such a
    tool and a dry run names it, both by this answer."""
    problem = tool.argument_errors(args)
    if problem is not None:
        return f"invalid arguments: {problem}"
    if tool.rules is None:
        return None
    ruling = rule_on(tool, args, caller, roles_of)
    if ruling.denial is not None:
        return ruling.denial
    if ruling.gate is not None:
        return f"refused: {tool.name} would need approval for these arguments; a fallback has none"
    return None


def _evaluate(tool: Tool, rules: ToolRules, context: Context) -> Ruling:
    decided: list[GateRule] = []
    failed = False
    if rules.deny is not None:
        denies, why = _check(rules.deny, context)
        if denies is True:
            reason = rules.deny_reason or rules.deny.text
            return Ruling(None, (_rule(tool, why),), f"{DENIED_BY_RULE}{reason}")
        failed = denies is None
        if failed:
            decided.append(_rule(tool, f"{why}: gated, a person decides instead"))
    spec = tool.spec
    if rules.requires is not None:
        holds, why = _check(rules.requires, context)
        decided.append(_rule(tool, why if holds is not None else f"{why}: gated"))
        gated = holds is not False
    else:
        gated = spec.gated
        if gated:
            decided.append(GateRule(TOOL_CONFIG, tool.name, _static_why(tool)))
    if not (gated or failed):
        return Ruling(None, tuple(decided))
    count, why_count = _count(spec.approvals_required, rules, context)
    if why_count:
        decided.append(_rule(tool, why_count))
    gate = Gate(spec.approvers, count, spec.approval_timeout_s, tuple(decided))
    return Ruling(gate, gate.rules)


def _check(condition: Condition, context: Context) -> tuple[bool | None, str]:
    """The condition's value (None when it failed) and how it came out, as text."""
    try:
        value = condition.holds(context)
    except RuleError as exc:
        return None, f"{condition.describe()} → failed ({exc})"
    return value, f"{condition.describe()} → {str(value).lower()}"


def _count(fixed: object, rules: ToolRules, context: Context) -> tuple[int, str | None]:
    """Approvals required: the first branch that holds; the largest when one fails first
    or none holds, so a rule that cannot say asks for more, never fewer."""
    if not rules.counts:
        assert isinstance(fixed, int)
        return fixed, None
    largest = max(count for _, count in rules.counts)
    for condition, count in rules.counts:
        holds, why = _check(condition, context)
        if holds is None:
            return largest, f"{why}: the largest count, {largest}"
        if holds:
            return count, f"{condition.describe()} → true: {count} approval(s)"
    return largest, f"approvals_required: no branch holds: the largest count, {largest}"


def _rule(tool: Tool, why: str) -> GateRule:
    return GateRule(CONDITION, tool.name, why)


def _static_why(tool: Tool) -> str:
    spec = tool.spec
    if spec.requires_approval is None:
        return f"risk: {spec.risk} (requires_approval unset: high risk needs approval)"
    return "requires_approval: true"
