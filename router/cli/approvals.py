"""``toolrouter approvals list|approve|deny``: the approver's command line."""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import urlencode

import click

from ..approval.model import RequestStatus
from ..json_input import finite, no_constants
from ..names import path_segment
from .common import Seconds
from .http import api_request

KEY_OPTION = click.option(
    "--key",
    envvar="TOOLROUTER_KEY",
    default=None,
    help="Approver key (default: $TOOLROUTER_KEY, else the demo approver)",
)


def _print(body: dict[str, object]) -> None:
    click.echo(json.dumps(body, indent=2))
    sys.exit(0 if body.get("ok") else 1)


def _state(item: dict[str, Any]) -> str:
    """When a pending request expires; for a decided one, how and by whom."""
    if item.get("status") == RequestStatus.PENDING:
        return f"expires in {int(item.get('expires_in_ms') or 0) // 1000} s"
    deciders = [d.get("approver") for d in item.get("decisions") or () if isinstance(d, dict)]
    return f"{item.get('status')}" + (f" by {', '.join(map(str, deciders))}" if deciders else "")


@click.command("list")
@click.option("--status", default="pending")
@click.option("--json", "as_json", is_flag=True, help="The requests as one JSON array")
@KEY_OPTION
def list_requests(status: str, as_json: bool, key: str | None) -> None:
    """Requests this key may read: those it may decide (an operator's: all)."""
    query = urlencode({"status": status})
    body = api_request("GET", f"/v1/approvals?{query}", key=key, role="approver")
    if not body.get("ok"):
        _print(body)
    requests = body.get("requests") or []
    assert isinstance(requests, list)
    if as_json:
        click.echo(json.dumps(requests, indent=2, sort_keys=True))
        return
    if not requests:
        click.echo(f"no {status} requests for this key")
    for item in requests:
        click.echo(
            f"{item['request_id']}  {item['tool']}  by {item['requested_by']}  {_state(item)}"
        )
        click.echo("  args: " + json.dumps(item.get("args"), sort_keys=True))
        click.echo(f"  args_sha256: {item.get('args_sha256')}")


@click.command("approve")
@click.argument("request_id")
@click.option("--reason", default=None)
@click.option(
    "--wait",
    "wait_s",
    type=Seconds(),
    default=0.0,
    help="Also wait this long for the call's outcome",
)
@click.option(
    "--args",
    "edited",
    default=None,
    help="Approve these arguments instead (a JSON object); the rules apply to them again",
)
@click.option(
    "--expect-sha256",
    "expected",
    default=None,
    help="Refuse (409) unless the arguments still have this args_sha256 (from `list`)",
)
@KEY_OPTION
def approve(
    request_id: str,
    reason: str | None,
    wait_s: float,
    edited: str | None,
    expected: str | None,
    key: str | None,
) -> None:
    """Approve one request, optionally with edited arguments."""
    payload: dict[str, object] = {"reason": reason} if reason else {}
    if expected is not None:
        payload["expected_args_sha256"] = expected
    if edited is not None:
        try:
            payload["args"] = json.loads(edited, parse_constant=no_constants, parse_float=finite)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
        except RecursionError:
            raise click.BadParameter("nested too deeply", param_hint="--args") from None
        if not isinstance(payload["args"], dict):
            raise click.BadParameter("must be a JSON object", param_hint="--args")
    if wait_s:
        payload["wait_s"] = wait_s
    _print(
        api_request(
            "POST",
            f"/v1/approvals/{path_segment(request_id)}/approve",
            key=key,
            role="approver",
            json_body=payload,
            timeout=wait_s + 30,
        )
    )


@click.command("deny")
@click.argument("request_id")
@click.option("--reason", default=None)
@KEY_OPTION
def deny(request_id: str, reason: str | None, key: str | None) -> None:
    """Deny one request."""
    payload = {"reason": reason} if reason else {}
    _print(
        api_request(
            "POST",
            f"/v1/approvals/{path_segment(request_id)}/deny",
            key=key,
            role="approver",
            json_body=payload,
        )
    )


def register(group: click.Group) -> None:
    for command in (list_requests, approve, deny):
        group.add_command(command)
