"""``toolrouter call``: submit one call through the HTTP API, as an agent would."""

from __future__ import annotations

import json
import sys

import click

from .http import api_request


@click.command()
@click.argument("tool")
@click.option("--args", "args_json", default="{}", help="Arguments as one JSON object")
@click.option("--wait", "wait_s", type=float, default=0.0, help="Seconds to wait for the outcome")
@click.option(
    "--key",
    envvar="TOOLROUTER_KEY",
    default=None,
    help="Bearer key (default: $TOOLROUTER_KEY, else the demo agent key)",
)
@click.option("--idempotency-key", default=None)
def call(
    tool: str, args_json: str, wait_s: float, key: str | None, idempotency_key: str | None
) -> None:
    """Submit a call and print its result as JSON; exit 0 only if it succeeded."""
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--args is not JSON: {exc}") from None
    body: dict[str, object] = {"tool": tool, "args": args}
    if wait_s:
        body["wait_s"] = wait_s
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    result = api_request(
        "POST", "/v1/calls", key=key, role="agent", json_body=body, timeout=wait_s + 30
    )
    click.echo(json.dumps(result, indent=2))
    suggestions = result.get("did_you_mean")
    if isinstance(suggestions, list) and suggestions:
        click.echo(f"did you mean: {', '.join(map(str, suggestions))}?", err=True)
    sys.exit(0 if result.get("ok") else 1)
