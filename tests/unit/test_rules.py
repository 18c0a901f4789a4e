"""Rules over arguments: CEL conditions compile at start-up, with errors that say where,
and evaluate to the stricter outcome when they cannot say."""

from __future__ import annotations

import re
from typing import Any

import celpy
import pytest

from router.dispatch.gate import CONDITION, DENIED_BY_RULE, Ruling, rule_on
from router.errors import ConfigError
from router.tools.config import parse_config
from router.tools.registry import Tool, ToolRegistry

WIRE = """tools:
  - name: wire
    handler: "tests.fixture_tools:echo"
    risk: high
    requires_approval: "args.amount > 1000 && caller != 'treasury-bot'"
    approvals_required:
      - {when: "args.amount > 10000", count: 2}
      - {when: "true", count: 1}
    deny_if: "args.to in ['blocked-account']"
    deny_reason: "transfers to blocked accounts are refused"
"""


def tool_from(text: str) -> Tool:
    registry = ToolRegistry.from_config(parse_config(text, file="t.yaml", env={}), file="t.yaml")
    return next(iter(registry))


def one_rule(key: str, expression: str) -> str:
    return (
        f'tools:\n  - name: t\n    handler: "tests.fixture_tools:echo"\n    {key}: {expression!r}\n'
    )


def config_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        tool_from(text)
    return caught.value


def rule(tool: Tool, args: Any, caller: str = "bot", roles: tuple[str, ...] = ()) -> Ruling:
    return rule_on(tool, args, caller, lambda name: roles)


def test_bad_syntax_names_the_file_the_tool_the_key_and_the_position() -> None:
    error = str(config_error(one_rule("deny_if", "args.amount >")))
    assert error.startswith("config error (file t.yaml, tool 't'): deny_if: line 1, column 13"), (
        error
    )


def test_an_unknown_function_is_refused_at_load_with_its_position() -> None:
    error = str(config_error(one_rule("requires_approval", "args.n > 1 && shell('ls')")))
    assert "requires_approval: line 1, column 15: unknown function shell()" in error, error


def test_an_unknown_name_is_refused_at_load() -> None:
    error = str(config_error(one_rule("deny_if", "amount > 1")))
    assert "deny_if: line 1, column 1: unknown name amount (known: args, caller, roles)" in error


def test_a_branch_of_approvals_required_is_named_by_its_index() -> None:
    text = (
        'tools:\n  - name: t\n    handler: "tests.fixture_tools:echo"\n'
        "    approvals_required: [{when: 'true', count: 1}, {when: 'args.x >', count: 2}]\n"
    )
    assert "approvals_required[1].when: line 1, column 8" in str(config_error(text))


def test_a_tool_without_conditions_has_no_rules_to_evaluate() -> None:
    tool = tool_from('tools:\n  - {name: t, handler: "tests.fixture_tools:echo", risk: high}\n')
    assert tool.rules is None
    ruling = rule(tool, {"amount": 5})
    assert ruling.gate is not None and ruling.gate.approvals_required == 1


def test_small_amounts_run_ungated_and_large_ones_need_more_approvers() -> None:
    tool = tool_from(WIRE)
    small = rule(tool, {"amount": 500, "to": "a"})
    assert small.gate is None and small.denial is None
    assert small.rules[-1].kind == CONDITION
    assert small.rules[-1].why.endswith("→ false")
    medium = rule(tool, {"amount": 5000, "to": "a"})
    assert medium.gate is not None and medium.gate.approvals_required == 1
    assert "approvals_required[1].when: true → true: 1 approval(s)" in medium.gate.rule_text
    large = rule(tool, {"amount": 20000, "to": "a"})
    assert large.gate is not None and large.gate.approvals_required == 2


def test_the_exempt_caller_runs_ungated() -> None:
    assert rule(tool_from(WIRE), {"amount": 5000, "to": "a"}, caller="treasury-bot").gate is None


def test_deny_if_refuses_with_its_reason() -> None:
    ruling = rule(tool_from(WIRE), {"amount": 5, "to": "blocked-account"})
    assert ruling.denial == DENIED_BY_RULE + "transfers to blocked accounts are refused"
    assert ruling.gate is None


def test_a_missing_field_fails_closed() -> None:
    ruling = rule(tool_from(WIRE), {"to": "a"})
    assert ruling.gate is not None
    # Neither branch can say, so the largest count applies.
    assert ruling.gate.approvals_required == 2
    assert "no such member" in ruling.gate.rule_text and "gated" in ruling.gate.rule_text


def test_a_wrong_type_fails_closed() -> None:
    ruling = rule(tool_from(WIRE), {"amount": "lots", "to": "a"})
    assert ruling.gate is not None and "failed" in ruling.gate.rule_text


def test_a_deny_if_that_cannot_be_evaluated_gates_instead_of_refusing() -> None:
    text = one_rule("deny_if", "args.to.startsWith('x')")
    ruling = rule(tool_from(text), {"to": 5})
    assert ruling.denial is None and ruling.gate is not None
    assert "gated, a person decides instead" in ruling.gate.rule_text


@pytest.mark.parametrize("key", ["requires_approval", "deny_if"])
def test_arguments_cel_cannot_hold_fail_every_condition_even_has(key: str) -> None:
    # Evaluated over an error value, has() answers false rather than failing: a deny_if
    # or requires_approval of has() would let such a call through.
    tool = tool_from(one_rule(key, "has(args.admin_override)"))
    ruling = rule(tool, {"admin_override": {"level": 2**70}})
    assert ruling.denial is None and ruling.gate is not None
    assert "signed 64 bits" in ruling.gate.rule_text and "failed" in ruling.gate.rule_text


def test_arguments_cel_cannot_hold_take_the_largest_count() -> None:
    ruling = rule(tool_from(WIRE), {"amount": -(2**63) - 1, "to": "bob"})
    assert ruling.gate is not None and ruling.gate.approvals_required == 2


def test_a_field_no_rule_reads_is_never_made_a_cel_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Converting is the costliest part of a rule: a call's large arguments beside the few
    # fields its rules read cost nothing, and an integer CEL cannot hold there fails nothing.
    converted: list[Any] = []
    to_cel = celpy.json_to_cel
    monkeypatch.setattr(celpy, "json_to_cel", lambda v: converted.append(v) or to_cel(v))
    pad = [2**70, *range(1000)]
    ruling = rule(tool_from(WIRE), {"amount": 5, "to": "bob", "pad": pad})
    assert ruling.gate is None and ruling.denial is None, ruling
    assert {"amount": 5, "to": "bob"} in converted
    assert not any("pad" in value for value in converted if isinstance(value, dict))


@pytest.mark.parametrize(
    "expression", ["size(args) > 0", "'pad' in args", "args['admin'] == true", "dyn(args).x == 1"]
)
def test_a_rule_that_reads_the_arguments_whole_fails_on_any_field_cel_cannot_hold(
    expression: str,
) -> None:
    ruling = rule(tool_from(one_rule("requires_approval", expression)), {"pad": 2**70})
    assert ruling.gate is not None and "signed 64 bits" in ruling.gate.rule_text, ruling


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        ("args.amount > 1000 && caller != 'x'", {"amount"}),
        ("has(args.a) && args.b.c == 1", {"a", "b"}),
        ("args.items.exists(i, i > 3)", {"items"}),
        ("roles.exists(r, r == 'x')", set()),
        ("size(args) > 2", None),
        ("'x' in args", None),
        ("args['x'] == 1", None),
        ("args.exists(k, k == 'x')", None),
        ("[1].exists(args, args > 0)", None),
        ("has(.args.admin_override)", None),
        ("size(.args) != 0 && args.x == 1", None),
    ],
)
def test_the_fields_an_expression_reads(expression: str, reads: set[str] | None) -> None:
    tool = tool_from(one_rule("requires_approval", expression))
    assert tool.rules is not None
    assert tool.rules.reads == (None if reads is None else frozenset(reads))


def test_a_value_that_is_not_a_bool_fails_closed() -> None:
    ruling = rule(tool_from(one_rule("requires_approval", "args.amount")), {"amount": 1})
    assert ruling.gate is not None and "not a bool" in ruling.gate.rule_text


def test_roles_are_read_only_when_a_rule_names_them() -> None:
    asked: list[str] = []

    def roles_of(name: str) -> tuple[str, ...]:
        asked.append(name)
        return ("finance",)

    tool = tool_from(one_rule("requires_approval", "!('finance' in roles)"))
    assert rule_on(tool, {}, "bot", roles_of).gate is None and asked == ["bot"]
    plain = tool_from(one_rule("requires_approval", "args.n > 1"))
    assert rule_on(plain, {"n": 2}, "bot", roles_of).gate is not None and asked == ["bot"]


def test_loading_the_rule_engine_keeps_the_recursion_limit() -> None:
    import subprocess
    import sys

    probe = (
        "import sys; before = sys.getrecursionlimit(); import router.tools.rules; "
        "print(before, sys.getrecursionlimit())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == out[1], out


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (".foo == 1", "unknown name .foo"),
        (".shell('ls')", "unknown function .shell()"),
        (".args().x == 1", "unknown function .args()"),
    ],
)
def test_a_name_read_from_the_root_is_checked_as_any_name(expression: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        tool_from(one_rule("requires_approval", expression))


def test_a_rule_reading_args_from_the_root_sees_every_field() -> None:
    tool = tool_from(one_rule("requires_approval", "has(.args.admin_override)"))
    ruling = rule(tool, {"admin_override": True, "to": "bob"})
    assert ruling.gate is not None, ruling
