"""Rules over arguments: ``requires_approval``, ``approvals_required`` and ``deny_if`` as CEL.

Each expression is compiled once, when the registry is built from the config, and a
mistake is a ``ConfigError`` naming the file, the tool, the key and the position. CEL is
sandboxed: an expression reads ``args``, ``caller`` and ``roles`` and nothing else, and
cannot call out. Evaluation never raises: a failure is a ``RuleError`` the caller turns
into the stricter outcome (``router.dispatch.gate``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import base_functions
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError

# What an expression may read; anything else is refused when it compiles.
CONTEXT = ("args", "caller", "roles")
# CEL's macros, which the parser keeps as calls.
_MACROS = {"has", "dyn", "all", "exists", "exists_one", "map", "filter"}
_FUNCTIONS = {name for name in base_functions if name[0].isalpha()} | _MACROS
_COMPARISONS = ("_<_", "_<=_", "_>_", "_>=_", "_==_", "_!=_")
_ARITHMETIC = ("_+_", "_-_", "_*_", "_/_", "_%_")
# celpy raises the process's recursion limit for CEL's deepest expressions; that limit is
# what stops every entrance's JSON parser on absurd nesting, and config rules are short.
_RECURSION_LIMIT = sys.getrecursionlimit()
_ENV = celpy.Environment()
sys.setrecursionlimit(_RECURSION_LIMIT)
_NUMBERS = (int, float)


def _bool_refused(
    function: Callable[[Any, Any], Any], refuses: Callable[[Any, Any], bool]
) -> Callable[[Any, Any], Any]:
    """``function`` failing, as CEL's own overloads do, where ``refuses`` its operands."""

    @wraps(function)
    def strict(left: Any, right: Any) -> Any:
        if refuses(left, right):
            raise TypeError("no such overload: a bool is not a number")
        return function(left, right)

    return strict


def _bool_beside_number(left: Any, right: Any) -> bool:
    one_bool = isinstance(left, celtypes.BoolType) != isinstance(right, celtypes.BoolType)
    return one_bool and isinstance(left, _NUMBERS) and isinstance(right, _NUMBERS)


def _any_bool(left: Any, right: Any) -> bool:
    return isinstance(left, celtypes.BoolType) or isinstance(right, celtypes.BoolType)


# cel-python's bool is a Python int, so `true > 1000` is false and `true * 2` is 2 where CEL
# has no such overload: an agent's `true` for a number would pass the rule, not fail it.
_STRICT_FUNCTIONS = {
    **{op: _bool_refused(base_functions[op], _bool_beside_number) for op in _COMPARISONS},
    **{op: _bool_refused(base_functions[op], _any_bool) for op in _ARITHMETIC},
    "_[_]": _bool_refused(base_functions["_[_]"], lambda _, index: _any_bool(index, None)),
}


class ApprovalCount(BaseModel):
    """One branch of ``approvals_required``: ``count`` approvals when ``when`` holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A CEL condition over `args`, `caller` and `roles`; `"true"` for a last, catch-all branch.
    when: str
    # Distinct approvers needed when this branch is the first that holds.
    count: int = Field(ge=1)


class RuleError(Exception):
    """Raised when an expression fails to evaluate (a missing field, a wrong type)."""


# What an expression reads, or why nothing can be read.
Context = dict[str, Any] | RuleError


@dataclass(frozen=True, slots=True)
class Condition:
    """One compiled expression and the key it was written under; ``reads``, the fields of
    ``args`` it can read (None: all of them)."""

    key: str
    text: str
    program: Any
    reads: frozenset[str] | None = None

    def holds(self, context: Context) -> bool:
        """The expression's value in ``context``; ``RuleError`` unless it is a bool, and
        always when the context could not be made."""
        if isinstance(context, RuleError):
            raise RuleError(str(context))
        try:
            value = self.program.evaluate(context)
        except Exception as exc:
            raise RuleError(_first_line(exc)) from None
        if isinstance(value, Exception):  # cel-python returns some errors as values
            raise RuleError(_first_line(value))
        if not isinstance(value, celtypes.BoolType):
            raise RuleError(f"value is {type(value).__name__}, not a bool")
        return bool(value)

    def describe(self) -> str:
        return f"{self.key}: {self.text}"


@dataclass(frozen=True, slots=True)
class ToolRules:
    """A tool's compiled conditions; a tool with none has no ``ToolRules`` at all."""

    requires: Condition | None
    counts: tuple[tuple[Condition, int], ...]
    deny: Condition | None
    deny_reason: str | None
    uses_roles: bool
    # The fields of ``args`` any condition can read (None: all of them); only these are
    # made CEL values, since converting is the costliest part of a rule on large arguments.
    reads: frozenset[str] | None = None


# Why every condition fails when CEL cannot hold the arguments.
ARGS_NOT_CEL = "the arguments hold an integer beyond CEL's signed 64 bits"


def context_of(
    args: Any, caller: str, roles: Iterable[str], reads: frozenset[str] | None = None
) -> Context:
    """The names an expression reads, as CEL values (of ``args``, the fields in ``reads``,
    or all); a ``RuleError`` when CEL cannot hold them, on which every condition fails (and
    a failed condition is strict): evaluated, ``has()`` would answer false of them rather
    than fail."""
    if reads is not None and isinstance(args, dict):
        args = {field: args[field] for field in reads if field in args}
    try:
        cel_args = celpy.json_to_cel(args)
    except (ValueError, OverflowError, TypeError):
        return RuleError(ARGS_NOT_CEL)
    return {
        "args": cel_args,
        "caller": celtypes.StringType(caller),
        "roles": celpy.json_to_cel(sorted(roles)),
    }


def compile_rules(
    requires_approval: bool | str | None,
    approvals_required: int | tuple[ApprovalCount, ...],
    deny_if: str | None,
    deny_reason: str | None,
    *,
    file: str,
    tool: str,
) -> ToolRules | None:
    """The tool's conditions compiled, or None when it has none (its gate is static)."""
    static = not isinstance(requires_approval, str) and isinstance(approvals_required, int)
    if static and deny_if is None:
        return None
    requires = (
        _compiled("requires_approval", requires_approval, file, tool)
        if isinstance(requires_approval, str)
        else None
    )
    counts: tuple[tuple[Condition, int], ...] = ()
    if not isinstance(approvals_required, int):
        if not approvals_required:
            raise ConfigError("approvals_required: a list needs one branch", file=file, tool=tool)
        counts = tuple(
            (_compiled(f"approvals_required[{i}].when", b.when, file, tool), b.count)
            for i, b in enumerate(approvals_required)
        )
    deny = _compiled("deny_if", deny_if, file, tool) if deny_if is not None else None
    conditions = [c for c in (requires, deny) if c] + [c for c, _ in counts]
    uses_roles = any("roles" in c.text for c in conditions)
    reads = [c.reads for c in conditions]
    every = None if None in reads else frozenset().union(*(r for r in reads if r is not None))
    return ToolRules(requires, counts, deny, deny_reason, uses_roles, every)


def _compiled(key: str, text: str, file: str, tool: str) -> Condition:
    try:
        program, reads = _program(text)
        return Condition(key, text, program, reads)
    except _Mistake as exc:
        raise ConfigError(f"{key}: {exc}", file=file, tool=tool) from None


class _Mistake(Exception):
    """Raised when an expression does not compile, with where and what."""


@lru_cache(maxsize=512)
def _program(text: str) -> tuple[Any, frozenset[str] | None]:
    """One program per distinct text, shared by every process-local registry built, and
    the fields of ``args`` it reads (``_fields_read``)."""
    try:
        tree = _ENV.compile(text)
    except celpy.CELParseError as exc:
        where = f"line {exc.line}, column {exc.column}" if exc.line else "position unknown"
        raise _Mistake(f"{where}: not valid CEL") from None
    bound: set[str] = set()
    for node in tree.iter_subtrees_topdown():
        if (
            node.data == "member_dot_arg"
            and str(node.children[1]) in _MACROS
            and len(node.children) > 2
        ):
            # A macro's first argument names the element it binds (``v`` in ``l.all(v, …)``).
            bound.update(_idents(node.children[2]))
    for node in tree.iter_subtrees_topdown():
        name = None
        if node.data == "ident_arg" and str(node.children[0]) not in _FUNCTIONS:
            name = f"unknown function {node.children[0]}()"
        elif node.data == "member_dot_arg" and str(node.children[1]) not in _FUNCTIONS:
            name = f"unknown function {node.children[1]}()"
        elif node.data == "dot_ident_arg" and str(node.children[0]) not in _FUNCTIONS:
            name = f"unknown function .{node.children[0]}()"  # a name read from the root
        elif node.data == "ident" and str(node.children[0]) not in (*CONTEXT, *bound):
            name = f"unknown name {node.children[0]} (known: {', '.join(CONTEXT)})"
        elif node.data == "dot_ident" and str(node.children[0]) not in CONTEXT:
            name = f"unknown name .{node.children[0]} (known: {', '.join(CONTEXT)})"
        if name is not None:
            raise _Mistake(f"line {node.meta.line}, column {node.meta.column}: {name}")
    reads = None if "args" in bound else _fields_read(tree)
    return _ENV.program(tree, functions=_STRICT_FUNCTIONS), reads


def _fields_read(tree: Any) -> frozenset[str] | None:
    """The fields ``f`` of every ``args.f`` in ``tree``; None when ``args`` appears in any
    other way (``size(args)``, ``args["f"]``, ``"f" in args``, a macro over it), where the
    expression may read any of its fields."""
    selected: set[int] = set()
    fields: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data != "member_dot":
            continue
        ident = _ident_of(node.children[0])
        if ident is not None and str(ident.children[0]) == "args":
            selected.add(id(ident))
            fields.add(str(node.children[1]))
    for node in tree.iter_subtrees():
        if node.data == "ident" and str(node.children[0]) == "args" and id(node) not in selected:
            return None
        if node.data == "dot_ident" and str(node.children[0]) == "args":
            return None  # `.args`, read from the root whatever binds the name
    return frozenset(fields)


def _ident_of(member: Any) -> Any:
    """The ``ident`` node of a member that is a bare name (``member → primary → ident``)."""
    if getattr(member, "data", None) != "member" or len(member.children) != 1:
        return None
    primary = member.children[0]
    if getattr(primary, "data", None) != "primary" or len(primary.children) != 1:
        return None
    ident = primary.children[0]
    return ident if getattr(ident, "data", None) == "ident" else None


def _idents(exprlist: Any) -> set[str]:
    first = next(iter(exprlist.children), None)
    if first is None:
        return set()
    return {str(n.children[0]) for n in first.iter_subtrees() if n.data == "ident"}


def _first_line(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    return text.splitlines()[0][:200] if text else type(exc).__name__
