"""Whether a call waits for approval, from whom, and which rule says so.

The dispatcher issues a request from this answer and a dry run explains it, so the two
never disagree. Each rule that gates a call names itself (``GateRule``); today the only
rule is the tool's own config (``risk`` or ``requires_approval``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tools.registry import Tool

TOOL_CONFIG = "tool_config"


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


def gate_of(tool: Tool) -> Gate | None:
    """The approval a call of ``tool`` needs, or None when it runs without one."""
    spec = tool.spec
    if not spec.gated:
        return None
    if spec.requires_approval is None:
        why = f"risk: {spec.risk} (requires_approval unset: high risk needs approval)"
    else:
        why = "requires_approval: true"
    return Gate(
        approvers=spec.approvers,
        approvals_required=spec.approvals_required,
        timeout_s=spec.approval_timeout_s,
        rules=(GateRule(TOOL_CONFIG, tool.name, why),),
    )
