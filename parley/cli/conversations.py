"""The commands about conversations other than decisions: ``send``, ``show``, ``list``,
``events``, ``end`` and ``chat``. Client side, through ``parley.client``; printing is
``parley.cli.rendering``, the interactive loop ``parley.cli.chat``.
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.cli.app import (
    AsJson,
    Session,
    User,
    conversations,
    fail,
    out,
    print_turn,
    run_async,
    settings,
)
from parley.cli.chat import run_chat
from parley.cli.following import send_message
from parley.cli.live_reply import LiveReply
from parley.cli.rendering import (
    print_conversation_list,
    print_snapshot,
)
from parley.client import (
    ConversationRefused,
    Conversations,
    ConversationSummary,
    check_identity,
    connect,
)
from parley.contracts import StateQuery, check_user_id
from parley.contracts.busy import WHILE_BUSY_MODES

#: ``--while-busy``'s choices (``parley.contracts.busy.WhileBusy``).
WhileBusyChoice = enum.Enum(  # type: ignore[misc]
    "WhileBusyChoice", {mode: mode for mode in WHILE_BUSY_MODES}, type=str
)


def send(
    session: Session,
    user: User,
    text: Annotated[
        str | None,
        typer.Argument(
            help="The message. '-', or nothing when input is piped in, reads it from "
            "standard input."
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", help="Read the message from this file (UTF-8).", dir_okay=False
        ),
    ] = None,
    message_id: Annotated[
        str | None,
        typer.Option(
            "--message-id",
            help="An id for this message: sending the same id again never applies it twice.",
        ),
    ] = None,
    reviewer: Annotated[
        list[str] | None,
        typer.Option(
            "--reviewer",
            help="A user who may read this conversation and decide on its calls "
            "(repeatable; only when this message starts the conversation).",
        ),
    ] = None,
    while_busy: Annotated[
        WhileBusyChoice | None,
        typer.Option(
            "--while-busy",
            metavar="MODE",
            help="If a turn is running: reject (refused), enqueue (the next turn, in order) "
            "or interrupt (the model call is cancelled, never a tool, and the turn goes on "
            "with this message too). Default: the conversation's (PARLEY_WHILE_BUSY when "
            "it started, else reject).",
            case_sensitive=False,
        ),
    ] = None,
    add_instructions: Annotated[
        str | None,
        typer.Option(
            "--add-instructions",
            metavar="TEXT|@FILE",
            help="Add to the agent's instructions for this conversation, as TEXT or read "
            "from @FILE: only on the message that starts it, and only where the worker "
            "allows it (PARLEY_ALLOW_ADDED_INSTRUCTIONS); audited.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Send a message (starting the conversation if new) and print the turn's result.
    The message is TEXT, the file of --file, or standard input (TEXT '-', or piped in).
    A queued message (--while-busy enqueue or interrupt) prints the result of the turn
    that answers it."""
    try:
        check_identity(session, user)
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    message = message_text(text, file)

    # The reply's text is written as it streams, except for --json (one JSON document).
    live = None if as_json else LiveReply(sys.stdout)
    result = send_message(
        session,
        user,
        message,
        message_id=message_id,
        reviewers=reviewer or (),
        while_busy=while_busy.value if while_busy else None,
        live=live,
        added_instructions=added_text(add_instructions),
    )
    streamed = live is not None and live.streamed_whole(result.reply)
    print_turn(result, as_json, session, user, reply_streamed=streamed)


def added_text(value: str | None) -> str | None:
    """``--add-instructions``: the text, or the file ``@path`` names (UTF-8); an empty
    addition is refused before anything is sent."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as problem:
            reason = getattr(problem, "strerror", None) or problem
            raise fail(f"cannot read the instructions to add from {path}: {reason}") from None
    if not text.strip():
        raise fail("--add-instructions is empty: give the text, or @FILE with some")
    return text.strip()


def message_text(text: str | None, file: Path | None) -> str:
    """The message to send: TEXT, or read from --file or standard input (as UTF-8, without
    its trailing newlines). An empty message is refused before anything is started."""
    if file is not None and text is not None:
        raise fail("give the message as TEXT or with --file, not both")
    if file is not None:
        try:
            raw, source = file.read_bytes(), str(file)
        except OSError as problem:
            raise fail(f"cannot read {file}: {problem.strerror or problem}") from None
    elif text == "-" or (text is None and sys.stdin is not None and not sys.stdin.isatty()):
        raw, source = sys.stdin.buffer.read(), "standard input"
    elif text is None:
        raise fail(
            "no message: give it as TEXT, with --file PATH, or on standard input "
            "(TEXT '-' or a pipe)"
        )
    else:
        raw, source = None, ""
    if raw is not None:
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as problem:
            raise fail(
                f"{source} is not UTF-8 text ({problem.reason} at byte {problem.start})"
            ) from None
    assert text is not None
    if not text.strip():
        raise fail("the message is empty")
    return text


def show(
    session: Session,
    user: User,
    offset: Annotated[
        int | None,
        typer.Option(
            help="How many messages to skip: the page starts at message OFFSET+1 (messages "
            "are numbered from 1, as fork --at and rewind --to count); default: the latest.",
            min=0,
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(help="How many messages (and latest audit entries) to show.", min=1, max=1000),
    ] = 50,
    as_json: AsJson = False,
) -> None:
    """Show a conversation: status, pending calls, a page of the transcript, audit log."""

    async def work() -> Any:
        conv = await conversations(session, user)
        snapshot = await conv.state(
            session,
            user,
            StateQuery(
                user_id=user, transcript_offset=offset, transcript_limit=limit, audit_limit=limit
            ),
        )
        if offset is not None and offset < snapshot.transcript_offset:
            older = await conv.transcript(session, user, offset, limit)
            snapshot = snapshot.model_copy(
                update={"transcript": older, "transcript_offset": offset}
            )
        return snapshot

    snapshot = run_async(work)
    if as_json:
        print(snapshot.model_dump_json(indent=2))
        return
    print_snapshot(snapshot, out, audit=True, hint=True, user=user)


def list_(
    user: User,
    limit: Annotated[
        int, typer.Option(help="Show at most this many conversations.", min=1, max=1000)
    ] = 50,
    reviewing: Annotated[
        bool,
        typer.Option(
            "--reviewing", help="Conversations of others that name you a reviewer, instead."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """List your conversations (from Temporal's visibility; no worker needed): those
    waiting for your decision first, then the others, the most recent first."""
    try:
        check_user_id(user)
    except ValueError as problem:
        raise fail(str(problem)) from None

    async def work() -> list[ConversationSummary]:
        config = settings()
        return await Conversations(await connect(config), config).list(user, reviewing=reviewing)

    found = run_async(work)
    if as_json:
        print(json.dumps([c.model_dump(mode="json") for c in found[:limit]], indent=2))
        return
    if not found:
        out.print(
            Text(
                f"no conversations for {user} to review"
                if reviewing
                else f"no conversations of {user}"
            )
        )
        return
    print_conversation_list(found, limit, out)


def events(
    session: Session,
    user: User,
    after: Annotated[int, typer.Option(help="Print events with offset greater than this.")] = -1,
) -> None:
    """Print the conversation's AG-UI events as JSON lines (offset, event)."""

    async def work() -> Any:
        return await (await conversations(session, user)).events(session, user, after)

    for item in run_async(work).events:
        print(item.model_dump_json())


def end(
    session: Session,
    user: User,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Terminate it now, in any state and with no worker running; pending calls "
            "never run.",
        ),
    ] = False,
) -> None:
    """End a conversation once its in-flight work is done (pending calls never run)."""

    async def work() -> Any:
        conv = await conversations(session, user)
        if force:
            return await conv.force_end(session, user)
        return await conv.end(session, user)

    run_async(work)
    out.print(Text(f"conversation {session} {'was terminated' if force else 'is ending'}"))


def chat(
    session: Session,
    user: User,
    while_busy: Annotated[
        WhileBusyChoice | None,
        typer.Option(
            "--while-busy",
            metavar="MODE",
            help="What each line does if a turn is running: reject, enqueue or interrupt, "
            "as for send. Without it, a refused line can be sent again with /enqueue or "
            "/interrupt.",
            case_sensitive=False,
        ),
    ] = None,
) -> None:
    """Talk to a conversation; answer approval prompts with approve/edit/reject/respond
    (a/e/r/s).

    /show shows the conversation; /revert lists the calls that ran and can be taken
    back, /revert N (a message number of /show) or /revert CALL_ID proposes the call's
    inverse, asked for like any pending call; /undo [CALL_ID] takes back approved calls
    in their undo window (also while chat waits one out); /enqueue and /interrupt send a
    line refused because a turn was running (or the text after them) as the next turn
    or into the turn in flight; /help lists these; /quit, Ctrl-D or Ctrl-C leaves."""
    mode = while_busy.value if while_busy else None
    try:
        code = run_chat(session, user, settings(), console=out, while_busy=mode)
    except ConversationRefused as refused:
        raise fail(refused.message) from None
    except (ValueError, FileNotFoundError) as problem:
        raise fail(str(problem)) from None
    raise typer.Exit(code)
