"""``parley inbox``: every call waiting on you, across conversations, the oldest first
(then the soonest to expire), read with no worker (``parley.client.inbox``); and
``parley inbox approve|reject --like SESSION:CALL_ID``, which answers that call and every
identical one (same tool, same canonical arguments) in its own conversation. Client side.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import AsJson, User, fail, out, run_async, settings
from parley.client import ConversationRefused, Conversations, check_identity, connect
from parley.client.errors import checked_user
from parley.client.inbox import BatchAction, BatchDecision, Inbox, decide_like, read_inbox

inbox_app = typer.Typer(
    help="Every call waiting on you, across conversations (no worker needed to read).",
    no_args_is_help=False,
)

Like = Annotated[
    str,
    typer.Option(
        "--like",
        metavar="SESSION:CALL_ID",
        help="The call to answer; every identical one in your inbox (same tool, same "
        "canonical arguments) is answered too, each in its own conversation.",
    ),
]


@inbox_app.callback(invoke_without_command=True)
def inbox(
    ctx: typer.Context,
    user: User = "",
    tool: Annotated[str | None, typer.Option("--tool", help="Only calls of this tool.")] = None,
    rule: Annotated[
        str | None, typer.Option("--rule", help="Only calls that wait because of this rule.")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Only this conversation's calls.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """List every call waiting on you (as owner or reviewer), across conversations: the
    oldest first, then the soonest to expire, with each conversation and expiry. Read
    from Temporal (visibility and histories): no worker needed."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = user
        return
    who = _checked(user, session)

    async def work() -> Inbox:
        config = settings()
        found = Conversations(await connect(config), config)
        return await read_inbox(found, who, tool=tool, rule=rule, session=session)

    found = run_async(work)
    if as_json:
        print(found.model_dump_json(indent=2))
        return
    print_inbox(found, who)


def approve(ctx: typer.Context, like: Like, user: User = "", as_json: AsJson = False) -> None:
    """Approve the call --like names and every identical one waiting on you."""
    _batch(ctx, "approve", like, user, None, as_json)


def reject(
    ctx: typer.Context,
    like: Like,
    user: User = "",
    message: Annotated[
        str | None, typer.Option("--message", "-m", help="Why (the model is told).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Reject the call --like names and every identical one waiting on you."""
    _batch(ctx, "reject", like, user, message, as_json)


inbox_app.command()(approve)
inbox_app.command()(reject)


def _checked(user: str, session: str | None = None) -> str:
    """The user id, and the session id when one is given, checked before connecting."""
    if not user:
        raise fail("give your user id: --user USER (before or after the subcommand)")
    try:
        if session is not None:
            check_identity(session, user)
        checked_user(user)
    except ConversationRefused as refusal:
        raise fail(refusal.message) from None
    return user


def _batch(
    ctx: typer.Context,
    action: BatchAction,
    like: str,
    user: str,
    message: str | None,
    as_json: bool,
) -> None:
    session, sep, call_id = like.partition(":")
    if not sep or not session or not call_id:
        raise fail(f"--like {like!r}: give SESSION:CALL_ID, as `parley inbox` prints it")
    who = _checked(user or (ctx.obj or ""), session)

    async def work() -> BatchDecision:
        config = settings()
        found = Conversations(await connect(config), config)
        return await decide_like(found, who, session, call_id, action, message=message)

    batch = run_async(work)
    if as_json:
        print(batch.model_dump_json(indent=2))
    else:
        for applied in batch.applied:
            label = applied.outcome.replace("_", " ")
            out.print(Text(f"{label}: {applied.session_id}: {applied.detail}"))
        for other in batch.different:
            out.print(Text(f"left out (its arguments differ): {other}"))
    missed = [a for a in batch.applied if a.outcome != "decided"]
    if missed:
        raise fail(
            f"{len(missed)} of {len(batch.applied)} conversation(s) not decided: "
            + ", ".join(a.session_id for a in missed)
        )


def _ago(then: datetime, now: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def print_inbox(found: Inbox, user: str) -> None:
    """The calls, one line each, then a hint per group of identical calls."""
    now = datetime.now(UTC)
    if not found.calls and not found.unread:
        out.print(Text(f"nothing waits on {user}"))
    groups: dict[tuple[str, str], list[str]] = {}
    for item in found.calls:
        call = item.call
        ref = f"{item.session_id}:{call.tool_call_id}"
        if call.args_hash:
            groups.setdefault((call.name, call.args_hash), []).append(ref)
        args = json.dumps(call.args, ensure_ascii=False)
        why = f"  rule {item.rule}" if item.rule else ""
        may = "" if item.awaiting.may_approve else f"  ({item.awaiting.text})"
        out.print(
            Text(
                f"{ref}  {call.name} {args}{why}  waiting {_ago(item.waiting_since, now)}"
                f"  expires in {_ago(now, call.expires_at)}  (owner {item.owner}){may}"
            )
        )
    for (tool, _), refs in groups.items():
        if len(refs) > 1:
            out.print(
                Text(
                    f"{len(refs)} identical {tool} calls: parley inbox approve --like "
                    f"{refs[0]} -u {user}"
                )
            )
    for unread in found.unread:
        out.print(
            Text(f"{unread.session_id}: {', '.join(unread.pending_tools)} wait; {unread.reason}")
        )
