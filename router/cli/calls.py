"""``toolrouter call``: submit one call through the HTTP API, as an agent would."""

from __future__ import annotations

import json
import sys

import click

from ..json_input import finite, no_constants
from ..names import path_segment
from ..status import CallStatus
from .common import Seconds
from .http import api_request

key_option = click.option(
    "--key",
    envvar="TOOLROUTER_KEY",
    default=None,
    help="Bearer key (default: $TOOLROUTER_KEY, else the demo agent key)",
)


@click.command()
@click.argument("tool")
@click.option("--args", "args_json", default="{}", help="Arguments as one JSON object")
@click.option(
    "--wait", "wait_s", type=Seconds(), default=0.0, help="Seconds to wait for the outcome"
)
@key_option
@click.option("--idempotency-key", default=None)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Submit nothing: print what submitting would do; exit 0 unless it would be refused",
)
def call(
    tool: str,
    args_json: str,
    wait_s: float,
    key: str | None,
    idempotency_key: str | None,
    dry_run: bool,
) -> None:
    """Submit a call and print its result as JSON; exit 0 only if it succeeded.

    With --dry-run, print what submitting it would do instead (its queue, the approval it
    needs and why, a refusal, the rate limit, the cache), with nothing stored or run."""
    try:
        args = json.loads(args_json, parse_constant=no_constants, parse_float=finite)
    except ValueError as exc:
        raise click.UsageError(f"--args is not JSON: {exc}") from None
    except RecursionError:
        raise click.UsageError("--args is nested too deeply") from None
    body: dict[str, object] = {"tool": tool, "args": args}
    if wait_s:
        body["wait_s"] = wait_s
    if idempotency_key is not None:  # an empty one is the API's to refuse, not to drop
        body["idempotency_key"] = idempotency_key
    if dry_run:
        body["dry_run"] = True
    try:
        result = api_request(
            "POST", "/v1/calls", key=key, role="agent", json_body=body, timeout=wait_s + 30
        )
    except KeyboardInterrupt:
        # Interrupted in its wait, the call may be accepted and go on, its id not yet told.
        if dry_run:
            said = "interrupted: nothing was submitted"
        elif idempotency_key is not None:
            said = (
                "interrupted: the call may have been accepted; run the command again to get"
                " it: with the same --idempotency-key it is that call, not a second one"
            )
        else:
            said = (
                "interrupted: the call may have been accepted, and then goes on; without an"
                " --idempotency-key, running the command again makes a second call"
            )
        click.echo(said, err=True)
        sys.exit(130)
    click.echo(json.dumps(result, indent=2))
    # A dry run's refusal carries the suggestions the refusal itself would.
    refused = result.get("refused")
    refused = refused if isinstance(refused, dict) else {}
    suggestions = result.get("did_you_mean") or refused.get("did_you_mean")
    if isinstance(suggestions, list) and suggestions:
        click.echo(f"did you mean: {', '.join(map(str, suggestions))}?", err=True)
    if dry_run:
        sys.exit(0 if result.get("dry_run") is True and not refused else 1)
    sys.exit(0 if result.get("ok") else 1)


@click.command()
@click.argument("call_id")
@key_option
def cancel(call_id: str, key: str | None) -> None:
    """Cancel one of your calls while it is queued or pending, as DELETE /v1/calls/{id}
    does; print the answer as JSON; exit 0 only if the call is cancelled."""
    result = api_request("DELETE", f"/v1/calls/{path_segment(call_id)}", key=key, role="agent")
    click.echo(json.dumps(result, indent=2))
    sys.exit(0 if result.get("status") == CallStatus.CANCELLED else 1)
