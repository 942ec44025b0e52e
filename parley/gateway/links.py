"""``/links/{token}``: a signed one-time approval link (``parley.contracts.links``) as a person
opens it from Slack, email or a pager. Client side (the gateway; no bearer token: the
link's signature is its authority, for its one call, user and action).

``GET`` only shows what the link would do (link previews and mail scanners fetch links,
and must not decide anything): the call, its arguments, its preview (what it would
change, ``parley.client.previews``; a refused one first, in red) and a button. ``POST``
decides: the call must still wait with the very arguments the link names, and the link
must not have been used; an approve is of the preview the page showed (the form sends
its hash back as ``preview_hash``: one that changed since refuses it); the decision is
the link's user's, audited with the link's id (channel ``link``), and it names only that
call. The update id is the link's and the preview's, so two clicks at once on one page
decide once. Every refusal is a page that says why: 403 a link Parley did not make, 410
an expired one, 409 one already used, a call decided otherwise or whose arguments
changed, 404 a conversation that is gone.

An approval refused because the preview changed (the target moved on between the page
and the click) ran nothing and does not use the link up: the page says so, shows what
the call would change now, and offers to approve that (the same link, pinned to the new
preview: a new update id), or to decide on the conversation's approval page.

An approve that lets a call run after its undo window answers as soon as the call is
scheduled (when it runs, how to undo it), not when the window ends; the decision goes
on in Temporal.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form
from fastapi.responses import HTMLResponse

from parley.client import ConversationRefused
from parley.client.previews import preview_lines
from parley.contracts import (
    SPEND_CALL,
    Decision,
    PendingCall,
    ScheduledCall,
    StateQuery,
    ToolPreview,
    TurnResult,
    refusal_of,
)
from parley.contracts.errors import ErrorType
from parley.contracts.links import ApprovalLink, LinkRefused, verify
from parley.gateway.deps import Gateway, gateway

router = APIRouter(include_in_schema=False)


@router.get("/links/{token}")
async def show_link(token: str, gw: Gateway = Depends(gateway)) -> HTMLResponse:
    try:
        link = _link(gw, token)
    except LinkRefused as refused:
        return _page(refused.status, "This link cannot decide", refused.reason)
    try:
        call = await _waiting_call(gw, link)
    except LinkRefused as refused:
        return _page(refused.status, "This link cannot decide", refused.reason, link=link)
    verb = "Approve" if link.action == "approve" else "Reject"
    reason = (
        '<p><label>Reason (optional)<br><textarea name="message" rows="3" class="reason">'
        "</textarea></label></p>"
        if link.action == "reject"
        else ""
    )
    if call.name == SPEND_CALL:  # not a tool: whether the conversation goes on spending
        what = "the conversation's spending past its mark"
        shown = (
            '<p class="spend-figures" data-testid="spend">Tokens so far: '
            f"<strong>{int(call.args['total_tokens']):,}</strong> Mark: "
            f"<strong>{int(call.args['mark']):,}</strong></p>"
            f'<p class="desc">{html.escape(call.description)}</p>'
        )
    else:
        what = f"<code>{html.escape(call.name)}</code>"
        args = html.escape(json.dumps(call.args, ensure_ascii=False, indent=2))
        shown = f'<pre class="args">{args}</pre>'
        if call.preview is not None:
            shown += _preview_html(call.preview)
    pinned = ""
    if link.action == "approve" and call.preview is not None:  # the approve is of it
        pinned = (
            f'<input type="hidden" name="preview_hash" value="{html.escape(call.preview.hash)}">'
        )
    body = (
        f"<p>{html.escape(link.user_id)}, this link will <strong>{link.action}</strong> "
        f"{what} in conversation <code>{html.escape(link.session_id)}</code>:</p>{shown}"
        f'<form method="post">{pinned}{reason}<div class="card-actions"><button type="submit" '
        f'class="{link.action}">{verb}</button></div></form>'
        f'<p class="small muted">It works once, until '
        f"{link.expires_at():%Y-%m-%d %H:%M} UTC.</p>"
    )
    title = "Go on spending?" if call.name == SPEND_CALL else f"{verb} {call.name}?"
    return _page(200, title, body, raw=True, link=link)


@router.post("/links/{token}")
async def use_link(
    token: str,
    message: str | None = Form(default=None),
    preview_hash: str | None = Form(default=None, max_length=64),
    gw: Gateway = Depends(gateway),
) -> HTMLResponse:
    try:
        link = _link(gw, token)
    except LinkRefused as refused:
        return _page(refused.status, "This link cannot decide", refused.reason)
    try:
        call = await _waiting_call(gw, link)
        # The preview the page showed: the decision is refused if it is no longer it.
        pinned = (preview_hash or None) if link.action == "approve" else None
        decision = Decision(
            tool_call_id=call.tool_call_id,
            action=link.action,
            args_hash=link.args_hash,
            preview_hash=pinned,
            message=(message or "").strip() or None if link.action == "reject" else None,
        )
        deciding = gw.conversations.decide(
            link.session_id,
            link.user_id,
            [decision],
            # A refused approval of one preview leaves the link for the next one.
            update_id=f"link-{link.link_id}" + (f"-{pinned[:16]}" if pinned else ""),
            run={"link": link.link_id},
        )
        if link.action == "approve" and _opens_window(call):
            answer = await _until_scheduled(gw, link, deciding)
            if isinstance(answer, ScheduledCall):
                return _page(200, "Decided", _scheduled_text(link, answer), link=link)
            result = answer
        else:
            result = await deciding
    except LinkRefused as refused:
        return _page(refused.status, "This link cannot decide", refused.reason, link=link)
    except ConversationRefused as refusal:
        moved = await _moved_preview(gw, link, preview_hash)
        if moved is not None:
            return _preview_changed(link, moved)
        return _page(409, "This link cannot decide", refusal.message, link=link)
    if result.left_waiting(call):
        why = await _refusal_of(gw, link)
        text = f"{why} {call.name} still waits for a decision."
        return _page(409, "Not decided", text, link=link)
    return _page(200, "Decided", _outcome(link, call, result), link=link)


#: The decisions a link started whose call waits out its undo window: the page answered
#: once the call was scheduled, the update answers after the window (kept referenced).
_IN_WINDOW: set[asyncio.Task[TurnResult]] = set()
#: How often the page reads the state for the call its approval scheduled.
WATCH_EVERY_SECONDS = 0.5


def _opens_window(call: PendingCall) -> bool:
    """Whether this approval lets the call run after an undo window (the quorum met)."""
    return bool(call.undo_seconds) and len(call.approvals) + 1 >= call.approvals_needed


async def _until_scheduled(
    gw: Gateway, link: ApprovalLink, deciding: Coroutine[Any, Any, TurnResult]
) -> TurnResult | ScheduledCall:
    """The decision's result, or, as soon as the state shows the call waiting out its
    undo window, that entry: the update itself answers only after the window."""
    task = asyncio.ensure_future(deciding)
    query = StateQuery(user_id=link.user_id, transcript_limit=0, audit_limit=0)
    while not task.done():
        try:
            state = await gw.conversations.state(link.session_id, link.user_id, query)
        except ConversationRefused:
            break  # the decision's own answer says what is wrong
        entry = next((s for s in state.scheduled if s.tool_call_id == link.tool_call_id), None)
        if entry is not None:
            _IN_WINDOW.add(task)
            task.add_done_callback(_forget)
            return entry
        await asyncio.wait({task}, timeout=WATCH_EVERY_SECONDS)
    return await task


def _forget(task: asyncio.Task[TurnResult]) -> None:
    _IN_WINDOW.discard(task)
    if not task.cancelled():
        task.exception()  # said by the conversation's audit; nobody waits for it here


def _scheduled_text(link: ApprovalLink, entry: ScheduledCall) -> str:
    at = f"{entry.runs_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    return (
        f"You approved {entry.name}; it waits out its undo window and runs at {at}. "
        f"Until then you (or the conversation's owner) may undo it on the approval page, "
        f"or with: parley undo --session {link.session_id} --user {link.user_id} "
        f"--call {entry.tool_call_id}"
    )


async def _refusal_of(gw: Gateway, link: ApprovalLink) -> str:
    """Why the decision on the link's call was not applied, as the audit log says."""
    snapshot = await gw.conversations.state(link.session_id, link.user_id)
    why = refusal_of(snapshot.audit, {link.tool_call_id})
    return f"The decision was refused: {why}." if why else "The decision was not applied."


async def _moved_preview(gw: Gateway, link: ApprovalLink, shown: str | None) -> PendingCall | None:
    """The link's call, if it still waits with a preview other than the one the page
    showed (``shown``): the approval was refused for that."""
    if link.action != "approve" or not shown:
        return None
    try:
        call = await _waiting_call(gw, link)
    except (LinkRefused, ConversationRefused):
        return None
    return call if call.preview is not None and call.preview.hash != shown else None


def _preview_changed(link: ApprovalLink, call: PendingCall) -> HTMLResponse:
    """The approval was refused because what the call would change moved on: nothing
    ran, and the person sees what it would change now, to approve that or not."""
    assert call.preview is not None
    body = (
        f"<p>Nothing ran: what <code>{html.escape(call.name)}</code> would change is no "
        "longer what the page showed you (its target moved on since), so your approval "
        "was refused. It still waits for a decision. This is what it would change now:</p>"
        f"{_preview_html(call.preview)}"
        '<form method="post"><input type="hidden" name="preview_hash" '
        f'value="{html.escape(call.preview.hash)}"><div class="card-actions">'
        '<button type="submit" class="approve">Approve what it would change now</button>'
        '</div></form><p class="small muted">Or decide otherwise (reject, edit) on the '
        "conversation's approval page.</p>"
    )
    return _page(409, "The preview changed", body, raw=True, link=link)


def _link(gw: Gateway, token: str) -> ApprovalLink:
    secret = gw.settings.link_secret
    if not secret:
        raise LinkRefused(404, "this gateway takes no approval links (PARLEY_LINK_SECRET)")
    return verify(token, secret, datetime.now(UTC))


async def _waiting_call(gw: Gateway, link: ApprovalLink) -> PendingCall:
    """The call the link decides, if it still waits with the link's arguments."""
    try:
        snapshot = await gw.conversations.state(link.session_id, link.user_id)
    except ConversationRefused as refusal:
        if refusal.error_type in (ErrorType.NOT_FOUND, ErrorType.NOT_OWNER):
            raise LinkRefused(404, f"conversation {link.session_id} is not there") from None
        raise LinkRefused(503, refusal.message) from None
    for call in snapshot.pending:
        if call.tool_call_id == link.tool_call_id:
            if call.args_hash != link.args_hash:
                raise LinkRefused(
                    409,
                    f"the arguments of {call.name} changed since this link was made "
                    f"(now {call.args_hash}); decide on the approval page",
                )
            return call
    used = [
        e for e in snapshot.audit if e.event == "decided" and e.detail.get("link") == link.link_id
    ]
    if used:
        return_at = f"{used[0].at:%Y-%m-%d %H:%M} UTC"
        raise LinkRefused(409, f"this link was already used, by {used[0].actor} at {return_at}")
    raise LinkRefused(
        409, f"call {link.tool_call_id} no longer waits for a decision (it was decided or expired)"
    )


def _preview_html(preview: ToolPreview) -> str:
    """The call's preview as the page shows it (text only: it comes from a tool)."""
    head, *rest = preview_lines(preview)
    kind = "ok" if head.kind == "head" else head.kind
    title = "Preview: " + (head.text.removeprefix("preview:").strip() or "what it would change")
    body = "\n".join(line.text[2:] for line in rest)
    shown = f'<pre class="preview-body">{html.escape(body)}</pre>' if rest else ""
    return (
        f'<details open class="preview preview-{kind}" data-testid="preview">'
        f'<summary class="preview-head">{html.escape(title)}</summary>{shown}</details>'
    )


def _outcome(link: ApprovalLink, call: PendingCall, result: TurnResult) -> str:
    ran = next((r for r in result.results if r.tool_call_id == call.tool_call_id), None)
    if link.action == "reject":
        return f"You rejected {call.name}; it did not run."
    if ran is not None:
        return f"You approved {call.name}; it ran: {ran.status}."
    waiting = next((p for p in result.pending if p.tool_call_id == call.tool_call_id), None)
    if waiting is not None and waiting.approvals_needed > 1:
        return (
            f"You approved {call.name}: {len(waiting.approvals)} of "
            f"{waiting.approvals_needed} approvals; it runs once enough reviewers approve."
        )
    return f"You approved {call.name}; it no longer waits for a decision."


def _page(
    status: int, title: str, body: str, *, raw: bool = False, link: ApprovalLink | None = None
) -> HTMLResponse:
    """A page in the approval page's look (its stylesheets and icon), leading back to
    the conversation when the link is one Parley made."""
    text = body if raw else f"<p>{html.escape(body)}</p>"
    back = (
        f'<p><a data-testid="back" href="/#c={quote(link.session_id)}">Open conversation '
        f"{html.escape(link.session_id)} on the approval page</a></p>"
        if link is not None
        else '<p><a data-testid="back" href="/">Open the approval page</a></p>'
    )
    sheets = "".join(
        f'<link rel="stylesheet" href="/static/{sheet}.css">' for sheet in ("base", "approvals")
    )
    page = (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · Parley</title>{sheets}"
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
        '<body class="link-page"><header class="topbar"><div class="brand">Parley</div>'
        f'</header><main class="card"><h1>{html.escape(title)}</h1>{text}{back}</main>'
        "</body></html>"
    )
    return HTMLResponse(page, status_code=status, headers={"Cache-Control": "no-store"})
