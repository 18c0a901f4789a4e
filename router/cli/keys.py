"""``toolrouter keys``: API keys, created and revoked."""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING

import click

from ..auth.key_cache import TTL_S
from ..errors import ConfigError, ToolrouterError
from ..status import Role
from .common import fail, get_settings, missing_database, runtime

if TYPE_CHECKING:
    from ..runtime import Runtime


@click.group()
def keys() -> None:
    """API keys."""


@keys.command("create")
@click.option("--name", required=True)
@click.option(
    "--role",
    "roles",
    multiple=True,
    required=True,
    help="agent, approver, operator, admin, or a custom approver role; repeatable",
)
def keys_create(name: str, roles: tuple[str, ...]) -> None:
    """Create a key; its token is printed once, alone on the last line."""
    made_here = missing_database(get_settings())
    rt = runtime(tools=False)
    for role in unheard_of(rt, roles):
        hint = difflib.get_close_matches(role, list(Role), n=1)
        also = f"; did you mean {hint[0]}?" if hint else ""
        click.echo(f"warning: role {role!r} is named by no tool in the config{also}", err=True)
    try:
        token = rt.keys.create(name, list(roles))
    except (ValueError, ToolrouterError) as exc:
        fail(str(exc))
    if made_here is not None:
        click.echo(
            f"note: there was no deployment here: this made one ({made_here} and its secret "
            "key), whose keys no deployment elsewhere knows; to add a key to a running one, "
            "run this in its folder or set TOOLROUTER_STATE_DIR",
            err=True,
        )
    click.echo(f"created key {name!r} with roles {', '.join(sorted(set(roles)))}")
    click.echo("the token below is shown only once:")
    click.echo(token)


def unheard_of(rt: Runtime, roles: tuple[str, ...]) -> list[str]:
    """Of ``roles``, those neither built in nor named by the config (a tool's approvers or
    escalation group, the notifications' roles): custom roles are allowed, typos likely."""
    try:
        config = rt.tool_config
    except ConfigError:
        return []  # the key does not need the config; its commands report it
    named = {str(role) for role in Role} | set(config.notifications.roles)
    for tool in config.tools:
        named.update(tool.approvers)
        if tool.escalate_to is not None:
            named.update(tool.escalate_to.roles)
    return [role for role in dict.fromkeys(roles) if role not in named]


@keys.command("revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Revoke a key by name."""
    rt = runtime(tools=False, existing=True)
    try:
        heard = rt.keys.revoke(name)
    except ToolrouterError as exc:
        fail(str(exc))
    click.echo(f"revoked key {name!r}")
    if heard is not None and heard.unconfirmed != 0:
        # Committed either way; what is left is how soon every API process refuses it.
        whom = (
            "the API processes could not be told (Redis)"
            if heard.unconfirmed is None
            else f"{heard.unconfirmed} of {heard.listening} API processes did not confirm"
        )
        click.echo(f"warning: {whom}; each refuses the key within {TTL_S:g} s", err=True)


@keys.command("list")
@click.option("--json", "as_json", is_flag=True, help="As one JSON array")
def keys_list(as_json: bool) -> None:
    """List keys (never their tokens)."""
    found = runtime(tools=False, existing=True).keys.list()
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True, default=str))
        return
    for key in found:
        state = "revoked" if key["revoked"] else "active"
        if not key["sealed"]:
            state += " (refused: not sealed with this deployment's key)"
        click.echo(f"{key['name']}\t{','.join(key['roles'])}\t{state}")  # type: ignore[arg-type]
