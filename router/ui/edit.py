"""``/ui/edit/…``: edit a pending call's arguments, review the change as a diff, then approve.

Both steps are forms with the session's CSRF token. The review page is rendered on the
server (the diff lines are autoescaped text); the confirmation carries the reviewed
arguments and the hash of the arguments they were edited from, and is refused if the
request has changed since, so an approver never approves an edit of arguments they did
not see. The approval worker then checks the edit again (schema, rules) and applies it.
"""

from __future__ import annotations

import difflib
import functools
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from ..approval.model import Decision
from ..auth.principal import Principal
from ..canonical import shown_plainly
from ..dispatch.checks import Checked, EditRefused
from ..errors import RequestError, Unavailable
from ..json_input import json_problem
from ..names import echo_name
from ..threads import in_thread
from .routes import (
    _page,
    _redirect_with_flash,
    _runtime,
    approver_form,
    outcome_line,
    reason_of,
)

router = APIRouter(prefix="/ui/edit", include_in_schema=False)
# Room for arguments as large as a call may send, plus their pretty-printing.
TEXT_MARGIN = 64 * 1024


def pretty(args: Any) -> str:
    """``args`` as indented JSON, with its text as written except where a page could not
    carry it or would not show it plainly: lone surrogates and characters that hide or
    reorder text are shown as their ``\\u`` escapes (``canonical.shown_plainly``)."""
    return shown_plainly(json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False))


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON, though Python's parser takes them.
    raise ValueError(f"{name} is not a JSON value")


def parse_args(text: str, limit: int) -> dict[str, Any] | str:
    """The edited arguments in ``text``, or the reason they are not a JSON object."""
    if len(text.encode()) > limit:
        return f"The arguments are too large (over {limit} bytes)."
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        return "The arguments nest too deeply."
    except ValueError as exc:
        return f"That is not valid JSON: {json_problem(exc)}."
    if not isinstance(value, dict):
        return "The arguments must be a JSON object: { … }."
    return value


def diff_lines(before: str, after: str) -> list[tuple[str, str]]:
    """A unified line diff of two texts as (kind, line); kind is add, del, hunk or same."""
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), n=3, lineterm="")
    return [(kinds.get(line[:1], "same"), line) for line in list(lines)[2:]]


async def _current(request: Request, who: Principal, request_id: str) -> dict[str, Any]:
    """The request as it stands, if this key may decide it now (else ``RequestError``), with
    how many times it has been edited (``edits``)."""
    view = _runtime(request).approvals_view
    found = await in_thread(view.precheck, who, request_id)
    return {**await in_thread(view.get, who, request_id), "edits": found.edits}


async def _vetted(request: Request, item: dict[str, Any], edited: Any) -> Checked | EditRefused:
    """The edit checked as the approval worker will check it (``Checks.check_edit``)."""
    checks = _runtime(request).dispatcher.checks
    return await in_thread(checks.check_edit, item["requested_by"], item["tool"], edited)


def _changed(item: dict[str, Any], form: FormData) -> bool:
    return str(form.get("args_sha256") or "") != item["args_sha256"]


CHANGED = "{}: its arguments changed since you opened them; nothing was sent. Review them again."


@router.post("/review")
async def review(request: Request) -> Response:
    """The edit as a diff against the arguments as they stand, with a confirm button; or
    the edit form again with an inline error, keeping the text."""
    checked = await approver_form(request)
    if isinstance(checked, Response):
        return checked
    who, form, csrf = checked
    request_id = str(form.get("request_id") or "")
    label = echo_name(request_id)  # as the form posted it: shown printable, and short
    try:
        item = await _current(request, who, request_id)
    except (RequestError, Unavailable) as exc:
        return _redirect_with_flash(request, f"{label}: {exc}")
    if _changed(item, form):
        return _redirect_with_flash(request, CHANGED.format(label))
    text = str(form.get("args") or "")
    limit = TEXT_MARGIN + _runtime(request).settings.max_args_bytes
    edited = parse_args(text, limit)
    context: dict[str, Any] = {"who": who, "csrf": csrf, "item": item, "text": text}
    if isinstance(edited, str):
        return _page(request, "edit.html", 422, error=edited, **context)
    vetted = await _vetted(request, item, edited)
    if isinstance(vetted, EditRefused):
        return _page(request, "edit.html", vetted.http_status, error=vetted.error, **context)
    if vetted.digest == item["args_sha256"]:
        return _page(request, "edit.html", 422, error="Nothing changed.", **context)
    after = pretty(edited)
    diff = diff_lines(pretty(item["args"]), after)
    return _page(request, "edit.html", diff=diff, edited=after, **context)


@router.post("/approve")
async def approve(request: Request) -> Response:
    """Approve with the reviewed arguments, unless the request changed since the review."""
    checked = await approver_form(request)
    if isinstance(checked, Response):
        return checked
    who, form, _ = checked
    request_id = str(form.get("request_id") or "")
    label = echo_name(request_id)  # as the form posted it: shown printable, and short
    runtime = _runtime(request)
    edited = parse_args(str(form.get("args") or ""), TEXT_MARGIN + runtime.settings.max_args_bytes)
    if isinstance(edited, str):
        return _redirect_with_flash(request, f"{label}: {edited} Nothing was sent.")
    try:
        reason = reason_of(form)
    except ValueError as exc:
        return _redirect_with_flash(request, f"{label}: {exc}")
    try:
        item = await _current(request, who, request_id)
        if _changed(item, form):
            return _redirect_with_flash(request, CHANGED.format(label))
        vetted = await _vetted(request, item, edited)
        if isinstance(vetted, EditRefused):
            return _redirect_with_flash(request, f"{label}: {vetted.error} Nothing was sent.")
        # The hash reviewed goes along: the approval worker refuses it if an edit came since.
        answer = await in_thread(
            functools.partial(runtime.decisions.send, expected_edits=item["edits"]),
            request_id,
            who.name,
            Decision.APPROVE,
            reason,
            edited,
            item["args_sha256"],
        )
    except (RequestError, Unavailable) as exc:
        return _redirect_with_flash(request, f"{label}: {exc}")
    line = outcome_line(label, answer)
    return _redirect_with_flash(request, f"{line} (edited)" if answer.get("ok") else line)
