"""``/docs`` renders in a browser that can reach nothing but the API: Swagger UI's script
and style come from the API, not a CDN."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from ..support.stack import Stack


def test_the_api_docs_render_with_no_other_host_reachable(stack: Stack, browser: Any) -> None:
    api_host = urlsplit(stack.base_url).netloc
    elsewhere: list[str] = []
    context = browser.new_context()
    try:
        page = context.new_page()

        def only_the_api(route: Any) -> None:
            if urlsplit(route.request.url).netloc == api_host:
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        page.route("**/*", only_the_api)
        page.goto(f"{stack.base_url}/docs")
        # Swagger UI draws the document's operations and title once it has read it.
        page.wait_for_selector(".opblock", timeout=60_000)
        assert page.inner_text(".info .title").startswith("toolrouter")
    finally:
        context.close()
    assert elsewhere == []


def test_the_docs_assets_are_served_without_a_key(stack: Stack) -> None:
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        response = httpx.get(f"{stack.base_url}/docs/static/{asset}")
        assert response.status_code == 200, asset
        assert len(response.content) > 10_000
    missing = httpx.get(f"{stack.base_url}/docs/static/nothing.js")
    assert missing.status_code == 404
    assert missing.json() == {"ok": False, "error": "Not Found"}
