"""``toolrouter call``: submit one call through the HTTP API, as an agent would."""

from __future__ import annotations

import json
import sys

import click
import httpx

from ..settings import get_settings
from .demo import demo_key


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
    settings = get_settings()
    try:
        args = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--args is not JSON: {exc}") from None
    token = key or demo_key(settings, "agent")
    if not token:
        raise click.UsageError("no key: pass --key or set TOOLROUTER_KEY")
    body: dict[str, object] = {"tool": tool, "args": args}
    if wait_s:
        body["wait_s"] = wait_s
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    url = f"http://{settings.api_host}:{settings.api_port}/v1/calls"
    try:
        response = httpx.post(
            url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=wait_s + 30
        )
    except httpx.HTTPError as exc:
        click.echo(f"error: cannot reach the API at {url}: {exc}", err=True)
        sys.exit(2)
    result = response.json()
    click.echo(json.dumps(result, indent=2))
    sys.exit(0 if result.get("ok") else 1)
