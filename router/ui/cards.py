"""What an inbox card shows of a pending request: its tool's risk, its arguments and
whether this key may edit them.

The list cuts long arguments: an agent could otherwise fill every approver's page with
megabytes (arguments are shown twice, as text and in the edit form, and escaping a quote
takes six bytes). A cut card can be denied, never approved or edited: the approver opens
the request's own page, which shows the arguments whole, to do either."""

from __future__ import annotations

import json
from typing import Any

from ..approval.model import approves_as
from ..auth.principal import Principal
from ..tools.registry import ToolRegistry

# Characters of a card's arguments (indented JSON) the list shows.
ARGS_SHOWN = 4000


def fill_card(item: dict[str, Any], registry: ToolRegistry, who: Principal, *, whole: bool) -> None:
    """Add what the card shows to ``item`` (a pending request as the API answers it);
    ``whole``: the request's own page, arguments never cut."""
    tool = registry.get(item["tool"])
    item["risk"] = tool.spec.risk if tool else "unknown"
    text = json.dumps(item["args"], indent=2, sort_keys=True)
    cut = not whole and len(text) > ARGS_SHOWN
    item["args_pretty"] = text[:ARGS_SHOWN] if cut else text
    item["args_cut"] = len(text) - ARGS_SHOWN if cut else 0
    # Operators see every request; only one this key may decide gets the edit form.
    item["may_edit"] = _may_decide(item, who)


def may_open(item: dict[str, Any], who: Principal) -> bool:
    """Whether the inbox lists ``item`` for ``who``: operators see every request, others
    those they may decide and have not decided yet (an N-of-M request)."""
    decided = any(d.get("approver") == who.name for d in item.get("decisions") or ())
    return who.is_operator or (_may_decide(item, who) and not decided)


def _may_decide(item: dict[str, Any], who: Principal) -> bool:
    return who.name != item["requested_by"] and approves_as(who.roles, item["approvers"])
