"""The CLI's way to the HTTP API: base URL and key from the settings, errors as exit codes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .children import api_port
from .common import get_settings, local_url
from .demo import demo_key

if TYPE_CHECKING:
    from ..settings import Settings


def api_key(settings: Settings, key: str | None, role: str) -> str:
    """``key``, else the demo key for ``role``, as an HTTP header can carry it."""
    # A key read from a file often ends in a line break.
    token = (key or demo_key(settings, role) or "").strip()
    if not token:
        raise click.UsageError("no key: pass --key or set TOOLROUTER_KEY")
    if not (token.isascii() and token.isprintable()):
        raise click.UsageError("the key has characters an HTTP header cannot carry")
    return token


def api_request(
    method: str,
    path: str,
    *,
    key: str | None,
    role: str,
    json_body: Any = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Call the API with ``key`` (else the demo key for ``role``); exits 2 when unreachable."""
    import urllib3  # here: most commands never reach the API

    settings = get_settings()
    token = api_key(settings, key, role)
    url = local_url(settings.api_host, api_port(settings)) + path
    try:
        response = urllib3.request(
            method,
            url,
            json=json_body,
            timeout=timeout,
            retries=False,
            headers={"Authorization": f"Bearer {token}"},
        )
    except urllib3.exceptions.HTTPError as exc:
        click.echo(f"error: cannot reach the API at {url}: {exc}", err=True)
        sys.exit(2)
    try:
        body = response.json()
    # Nesting deeper than the parser recurses raises RecursionError, not ValueError.
    except (ValueError, RecursionError):
        body = {"ok": False, "error": f"HTTP {response.status}"}
    return body if isinstance(body, dict) else {"ok": False, "error": "unexpected answer"}
