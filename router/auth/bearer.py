"""The bearer key a request carries: one ``Authorization: Bearer <key>`` header."""

from __future__ import annotations

from starlette.datastructures import Headers

from ..errors import NotAuthenticated


def bearer_token(headers: Headers) -> str | None:
    """The key, or None when no header gives one. A header given twice is refused: a proxy
    and the API may each read another of the two, so neither may count."""
    given = headers.getlist("authorization")
    if not given:
        return None
    if len(given) > 1:
        raise NotAuthenticated("more than one Authorization header")
    scheme, _, token = given[0].partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
