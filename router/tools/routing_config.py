"""The ``routing`` table of the tool config: the ``rules`` strategy's patterns.

A rule is checked in two steps, both before a process starts anything: its keys and its
pattern when the config loads (``parse_routing``), the tool it names when the registry is
built (``check_rule_tools``), after the MCP servers' tools are imported, so a rule may
name one of theirs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import ConfigError

# What `routing` is when it is not a mapping of known keys.
ROUTING_SHAPE = "routing must be a mapping with a 'rules' list"


class Rule(BaseModel):
    """A task its ``pattern`` matches ranks ``tool``, with ``priority`` as its score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A regular expression (Python's `re`), searched for anywhere in the task, ignoring case.
    pattern: str
    # The tool a match ranks: one of `tools`, or one imported from an MCP server
    # (`<server>.<tool>`).
    tool: str
    # A match's score: matching rules are listed highest priority first.
    priority: int = 0
    # A match's reason; unset: the rule's pattern.
    description: str = ""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, text: str) -> str:
        try:
            re.compile(text, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return text

    @cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.IGNORECASE)


class Routing(BaseModel):
    """Rules for the ``rules`` strategy of ``POST /v1/route`` and ``toolrouter route``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The rules, each a mapping of the keys in the next table.
    rules: tuple[Rule, ...] = ()


def parse_routing(raw: Any, *, file: str) -> Routing:
    """The config's ``routing`` table; ``ConfigError`` naming the first mistake's place
    (``routing.rules[1].pattern``), as a tool's are named."""
    if raw is None:
        return Routing()
    if not isinstance(raw, dict):
        raise ConfigError(ROUTING_SHAPE, file=file)
    try:
        return Routing.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt key is also a missing one: the misspelling is what to point at.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = "routing" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        )
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        raise ConfigError(f"{where}: {message}", file=file) from None


def check_rule_tools(routing: Routing, names: Collection[str], *, file: str) -> None:
    """``ConfigError`` for the first rule naming none of ``names``, the registered tools:
    such a rule would never match, silently."""
    for index, rule in enumerate(routing.rules):
        if rule.tool in names:
            continue
        close = difflib.get_close_matches(rule.tool, list(names), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"routing.rules[{index}].tool: unknown tool: {rule.tool}{hint}", file=file
        )
