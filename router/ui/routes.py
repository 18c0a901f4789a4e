"""``/ui/``: sign in, the inbox, decisions (one or several), sign out.

Pages are server-rendered (Jinja2, autoescaped: arguments may hold HTML or script). Every
state-changing form carries a CSRF token bound to the session; decisions go through the
same pre-checks and the same approval worker as ``POST /v1/approvals/…``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.datastructures import FormData

from ..approval.model import MAX_REASON_CHARS, Decision
from ..auth.principal import Principal
from ..auth.sessions import (
    COOKIE,
    FLASH_COOKIE,
    LoginThrottle,
    Session,
    SessionStore,
    throttled_as,
)
from ..canonical import SHA256_HEX, ascii_json, shown_plainly
from ..constants import LOGIN_FAILURES
from ..errors import NotAuthenticated, RequestError, Unavailable
from ..messaging.redis_clients import redis_client
from ..names import echo_name
from ..runtime import Runtime
from ..threads import in_thread
from .cards import fill_card

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
MAX_SELECTED = 100
# An approval of a card whose arguments the list cut (``router.ui.cards``).
CUT = "its arguments were cut on the list; open the request to read them all and approve"
# Decisions told one line each after a bulk decision; more are summed up.
FLASH_LINES = 10

router = APIRouter(prefix="/ui", include_in_schema=False)


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _sessions(request: Request) -> SessionStore:
    return _runtime(request).sessions


def _throttle(request: Request) -> LoginThrottle:
    throttle: LoginThrottle | None = getattr(request.app.state, "login_throttle", None)
    if throttle is None:
        runtime = _runtime(request)
        # Short timeouts: a sign-in waits on them (in a thread, never on the event loop).
        shared = redis_client(runtime.redis_url, socket_timeout=1, socket_connect_timeout=1)
        throttle = request.app.state.login_throttle = LoginThrottle(
            runtime.settings.ui_login_failures_per_minute,
            shared=shared,
            key_prefix=runtime.namespace.key(LOGIN_FAILURES),
        )
    return throttle


async def _signed_in(request: Request) -> tuple[Session, Principal] | None:
    """The live session of this request's cookie and its key, re-read every request: a
    revoked key or an ended session is signed out at once."""
    return await in_thread(_sessions(request).resolve, request.cookies.get(COOKIE))


def _same_origin(request: Request) -> bool:
    """Whether a form was posted from this site's own pages (browsers say so in
    ``Sec-Fetch-Site`` and ``Origin``); a request saying neither is refused."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return site == "same-origin"
    parts = urlsplit(origin)
    return parts.scheme == request.url.scheme and parts.netloc == request.headers.get("host")


def _client(request: Request) -> str:
    """The client a sign-in is counted against (an IPv6 client by its /64)."""
    return throttled_as(request.client.host) if request.client is not None else "unknown"


def _page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    response = TEMPLATES.TemplateResponse(request, name, context, status_code=status)
    return response


def _not_allowed(
    request: Request, signed_in: tuple[Session, Principal] | None, reason: str | None = None
) -> HTMLResponse:
    """The "Not allowed" page; a live session gets its sign-out form with the session's
    CSRF token, without which the sign-out is refused."""
    if signed_in is None:
        return _page(request, "forbidden.html", 403, reason=reason)
    current, who = signed_in
    csrf = _sessions(request).csrf(current)
    return _page(request, "forbidden.html", 403, reason=reason, who=who, csrf=csrf)


def _redirect_with_flash(request: Request, message: str) -> RedirectResponse:
    # Lines may echo what a form posted (a request id): shown as text, never as controls.
    message = shown_plainly(message)
    response = RedirectResponse("/ui/", status_code=303)
    response.set_cookie(
        FLASH_COOKIE,
        _sessions(request).sign_flash(message, request.cookies.get(COOKIE, "")),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
        max_age=60,
    )
    return response


# Requests one inbox page lists, oldest first; the count says when more wait behind them.
INBOX_SHOWS = 200
# A request's anchor, as notification links write it (``router.ids.new_request_id``).
REQUEST_ANCHOR = re.compile(r"#req-[0-9a-f]{32}")


async def approver_page(request: Request) -> tuple[Session, Principal] | Response:
    """The signed-in approver of a page, or the page for anyone else: the sign-in form,
    or "Not allowed" for a key without an approver role."""
    signed_in = await _signed_in(request)
    if signed_in is None:
        return _page(request, "login.html")
    if not signed_in[1].is_approver:
        return _not_allowed(request, signed_in)
    return signed_in


@router.get("/", response_class=HTMLResponse)
async def inbox(request: Request) -> Response:
    signed_in = await approver_page(request)
    if isinstance(signed_in, Response):
        return signed_in
    current, who = signed_in
    runtime = _runtime(request)
    pending = await in_thread(runtime.approvals_view.list_requests, who, "pending", INBOX_SHOWS + 1)
    more = len(pending) > INBOX_SHOWS
    del pending[INBOX_SHOWS:]
    history = await in_thread(runtime.approvals_view.history, who, 20)
    for item in pending:
        fill_card(item, runtime.registry, who, whole=False)
    flash = _sessions(request).read_flash(
        request.cookies.get(FLASH_COOKIE), request.cookies.get(COOKIE, "")
    )
    page = _page(
        request,
        "inbox.html",
        who=who,
        pending=pending,
        more=more,
        history=history,
        csrf=_sessions(request).csrf(current),
        flash=flash,
        expires_ms=current.expires_ms,
        now_ms=runtime.clock(),
    )
    if flash is not None:
        page.delete_cookie(FLASH_COOKIE, path="/ui")
    return page


@router.get("/pending.json")
async def pending_ids(request: Request) -> Response:
    """What the page polls to know when new requests arrived (ids only, no arguments)."""
    signed_in = await _signed_in(request)
    if signed_in is None or not signed_in[1].is_approver:
        return Response(
            ascii_json({"ok": False, "error": "not signed in"}),
            status_code=401,
            media_type="application/json",
        )
    items = await in_thread(
        _runtime(request).approvals_view.list_requests, signed_in[1], "pending", INBOX_SHOWS
    )
    body = {"ok": True, "request_ids": [item["request_id"] for item in items]}
    return Response(ascii_json(body), media_type="application/json")


def _request_anchor(value: object) -> str:
    """``#req-…`` from the sign-in form (the link it was opened from), else nothing: only
    a request id goes into the redirect."""
    return f"#{value[1:]}" if isinstance(value, str) and REQUEST_ANCHOR.fullmatch(value) else ""


@router.post("/login")
async def login(request: Request) -> Response:
    """Sign in with a key: a new session, never the key itself, goes into the cookie."""
    if not _same_origin(request):
        return _page(request, "forbidden.html", 403, reason="Sign in from this site's own page.")
    throttle = _throttle(request)
    # Counted as failed until the key is accepted: parallel guesses cannot all get past
    # the limit before the first of them fails.
    attempt = await in_thread(throttle.begin, _client(request))
    if attempt.wait_s > 0:
        return _page(
            request,
            "login.html",
            429,
            error=(
                f"Too many failed sign-ins from your address; try again in {attempt.wait_s:.0f} s."
            ),
        )
    form = await request.form()
    token = str(form.get("key") or "").strip()
    runtime = _runtime(request)
    try:
        who = await in_thread(runtime.keys.authenticate, token)
    except NotAuthenticated:
        return _page(request, "login.html", 401, error="That key was not accepted.")
    except Exception:
        # Not a wrong key (the database did not answer): it does not count against anyone.
        await in_thread(throttle.take_back, attempt)
        raise
    await in_thread(throttle.take_back, attempt)
    if not who.is_approver:
        # No session for this key: the header shows the one the browser may still hold.
        return _not_allowed(request, await _signed_in(request))
    hours = runtime.settings.ui_session_hours
    cookie, _ = await in_thread(_sessions(request).start, who, hours)
    response = RedirectResponse(f"/ui/{_request_anchor(form.get('request'))}", status_code=303)
    response.set_cookie(
        COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        path="/ui",
        max_age=int(hours * 3600),
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """End the session on the server, not only in the browser."""
    signed_in = await _signed_in(request)
    form = await request.form()
    if signed_in is not None and not _csrf_ok(request, signed_in[0], form):
        return _not_allowed(request, signed_in, "The form was stale; reload it.")
    await in_thread(_sessions(request).end, request.cookies.get(COOKIE))
    response = RedirectResponse("/ui/", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


def _csrf_ok(request: Request, current: Session, form: FormData) -> bool:
    return _sessions(request).csrf_ok(current, str(form.get("csrf") or ""))


async def approver_form(request: Request) -> tuple[Principal, FormData, str] | Response:
    """The signed-in approver, their form and a fresh CSRF token; or the response refusing
    them (signed out, not an approver, a stale form)."""
    signed_in = await _signed_in(request)
    if signed_in is None:
        return RedirectResponse("/ui/", status_code=303)
    current, who = signed_in
    if not who.is_approver:
        return _not_allowed(request, signed_in)
    form = await request.form()
    if not _csrf_ok(request, current, form):
        return _not_allowed(request, signed_in, "The form was stale; reload it.")
    return who, form, _sessions(request).csrf(current)


@router.post("/decide")
async def decide(request: Request) -> Response:
    """Approve or deny one request, or several explicitly selected ones: each is its own
    decision, sent to the approval worker and audited on its own."""
    checked = await approver_form(request)
    if isinstance(checked, Response):
        return checked
    who, form, _ = checked
    decision = str(form.get("decision") or "")
    if decision not in (Decision.APPROVE, Decision.DENY):
        return _redirect_with_flash(request, "Choose approve or deny.")
    request_ids = [str(value) for value in form.getlist("request_id")]
    if not request_ids:
        return _redirect_with_flash(request, "Select at least one request.")
    if len(request_ids) > MAX_SELECTED:
        return _redirect_with_flash(
            request, f"Select at most {MAX_SELECTED} requests at a time. Nothing was sent."
        )
    try:
        reason = reason_of(form)
    except ValueError as exc:
        return _redirect_with_flash(request, str(exc))
    runtime = _runtime(request)
    lines, refused = [], []
    for request_id in request_ids:
        label = echo_name(request_id)  # as the form posted it: shown printable, and short
        # The hash of the arguments the page showed: an edit since then refuses an approval.
        # (A denial ends the request whatever its arguments.)
        shown = str(form.get(f"args_sha256.{request_id}") or "")
        try:
            found = await in_thread(runtime.approvals_view.precheck, who, request_id)
            if decision == Decision.APPROVE and not SHA256_HEX.fullmatch(shown):
                why = CUT if form.get(f"cut.{request_id}") else "the page was stale; reload it"
                lines.append(f"{label}: {why}. Nothing was sent.")
                refused.append(lines[-1])
                continue
            answer = await in_thread(
                functools.partial(
                    runtime.decisions.send,
                    request_id,
                    who.name,
                    decision,
                    reason,
                    expected_args_sha256=shown if decision == Decision.APPROVE else None,
                    expected_edits=found.edits if decision == Decision.APPROVE else None,
                )
            )
        except (RequestError, Unavailable) as exc:
            lines.append(f"{label}: {exc}")
            refused.append(lines[-1])
            continue
        lines.append(outcome_line(label, answer))
        if not answer.get("ok"):
            refused.append(lines[-1])
    return _redirect_with_flash(request, flash_of(lines, refused))


def flash_of(lines: list[str], refused: list[str]) -> str:
    """One line per decision while they fit the flash; past that, a count of those
    decided as asked, the first refusals and a count of any more."""
    if len(lines) <= FLASH_LINES:
        return "\n".join(lines)
    shown = refused[:FLASH_LINES]
    summary = f"{len(lines) - len(refused)} of {len(lines)} decided as asked"
    more = len(refused) - len(shown)
    return "\n".join([summary, *shown, *([f"and {more} more refused"] if more else [])])


def reason_of(form: FormData) -> str | None:
    """The form's reason, its lines and runs of spaces joined by single spaces (as the API
    takes it: printable, at most ``MAX_REASON_CHARS``); ``ValueError`` naming the first
    character it cannot keep (a NUL, which no database stores; an invisible format mark),
    or its length past the limit."""
    given = form.get("reason") or ""
    if not isinstance(given, str):  # a file sent in the reason's place
        raise ValueError("The reason must be text. Nothing was sent.")
    reason = " ".join(given.split())
    if len(reason) > MAX_REASON_CHARS:  # a browser stops at it; a script may not
        raise ValueError(
            f"The reason is {len(reason)} characters, over the limit of {MAX_REASON_CHARS}; "
            "shorten it. Nothing was sent."
        )
    for position, character in enumerate(reason, start=1):
        if not character.isprintable():
            raise ValueError(
                f"The reason holds U+{ord(character):04X} at character {position}, which "
                "cannot be kept; remove it. Nothing was sent."
            )
    return reason or None


def outcome_line(request_id: str, answer: dict[str, Any]) -> str:
    """The flash line for the approval worker's ``answer`` on one decision."""
    if not answer.get("ok"):
        return f"{request_id}: {answer.get('error')}"
    status = answer.get("status")
    if status == "approved" and not answer.get("released"):
        status = f"approved ({answer.get('approvals')} of {answer.get('approvals_required')})"
    return f"{request_id}: {status}"
