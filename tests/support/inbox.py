"""The approval inbox as a browser uses it: sign-in, its cookie, its pages and forms, and a
second API process on the same stack for tests that change its settings."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select as sql_select

from router.cli import processes
from router.db.schema import ui_sessions

from .launcher import REPO, free_port, stop_group, wait_for_http
from .stack import Stack
from .trust import SESSION_COOKIE, runtime_of


def browser_headers(stack: Stack) -> dict[str, str]:
    """What a browser sends with a form posted from the inbox's own page."""
    return {"Origin": stack.base_url, "Sec-Fetch-Site": "same-origin"}


def sign_in_with(http: httpx.Client, token: str) -> httpx.Response:
    return http.post("/ui/login", data={"key": token}, headers={"Origin": str(http.base_url)})


def sign_in(base_url: str, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        return http.post(
            "/ui/login", data={"key": token}, headers={"Origin": base_url, **(headers or {})}
        )


def session_cookie(response: httpx.Response) -> str:
    assert response.status_code == 303, (response.status_code, response.text[:300])
    cookie = response.cookies.get(SESSION_COOKIE)
    assert cookie, response.headers
    return cookie


def inbox_page(base_url: str, cookie: str, path: str = "/ui/") -> httpx.Response:
    with httpx.Client(base_url=base_url, timeout=30) as http:
        return http.get(path, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})


def is_login_page(page: httpx.Response) -> bool:
    return page.status_code == 200 and 'id="key"' in page.text and "signed in as" not in page.text


def is_inbox_of(page: httpx.Response, name: str) -> bool:
    return page.status_code == 200 and f"signed in as <b>{name}</b>" in page.text


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert match, page.text[:500]
    return match.group(1)


def session_rows(stack: Stack, key_name: str) -> list[Any]:
    with runtime_of(stack.settings) as runtime, runtime.store.reading() as conn:
        return list(
            conn.execute(sql_select(ui_sessions).where(ui_sessions.c.key_name == key_name)).all()
        )


@contextmanager
def second_api(stack: Stack, log: Path, **env: str) -> Iterator[str]:
    """Another API process on the stack's database and Redis (its own memory: throttle,
    caches); yields its base URL."""
    port = free_port()
    with log.open("wb") as handle:
        api = subprocess.Popen(
            # The command line is the parent's to choose from its settings, as `up` does.
            processes.api_argv(
                stack.settings.model_copy(
                    update={"trusted_proxies": env.get("TOOLROUTER_TRUSTED_PROXIES", "")}
                ),
                port=port,
            ),
            env={**stack.env, **env},
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base_url}/healthz", api, log.read_text(errors="replace"))
        yield base_url
    finally:
        stop_group(api)
