"""``parley send``'s message on its way: sent with a run id of its own so that only its
turn is printed as it streams (``parley.cli.live_reply``), and the one line the command
says when it cannot finish. Client side, through ``parley.client``.

What becomes of the message is said in the CLI's words: a busy conversation's refusal
names ``--while-busy`` (the workflow's names the gateway's field); when Temporal stops
answering mid-command, or the user presses Ctrl-C, the line says whether the message
was taken (its run had started) or may not have been, and how to check or send it
again without its being applied twice (``--message-id``).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence

import typer
from rich.text import Text

from parley.cli.app import conversations, err, run_async
from parley.cli.live_reply import LiveReply, OwnRun, new_run_id, send_following
from parley.client import ConversationRefused, Conversations
from parley.contracts import TurnResult
from parley.contracts.errors import ErrorType

#: The exit status of a command stopped with Ctrl-C (128 + SIGINT).
INTERRUPTED = 130


def send_message(
    session: str,
    user: str,
    text: str,
    *,
    message_id: str | None,
    reviewers: Sequence[str],
    while_busy: str | None,
    live: LiveReply | None,
    added_instructions: str | None = None,
) -> TurnResult:
    """Send ``text`` and return its turn's result; its reply streams to ``live``. A
    refusal, Temporal going away, or Ctrl-C ends the command with one line."""
    message_id = message_id or uuid.uuid4().hex[:16]  # known here: the line may name it
    run_id = new_run_id()
    own = OwnRun(run_id, message_id)
    connected = False

    async def work() -> TurnResult:
        nonlocal connected
        client: Conversations = await conversations(session, user)
        connected = True

        def send() -> Awaitable[TurnResult]:
            return client.send(
                session,
                user,
                text,
                message_id=message_id,
                reviewers=reviewers,
                while_busy=while_busy,  # type: ignore[arg-type]
                run={"run_id": run_id},
                added_instructions=added_instructions,
            )

        try:
            if live is None:
                return await send()
            return await send_following(client, session, user, send, live, own=own)
        except ConversationRefused as refused:
            _end_line(live)  # the error's line starts a line of its own
            raise ConversationRefused(
                _cli_words(refused, session, user, message_id, taken=own.inside or own.ended),
                refused.error_type,
            ) from None

    try:
        return run_async(work)
    except KeyboardInterrupt:
        _end_line(live)
        taken = own.inside or own.ended
        fate = message_fate(session, user, message_id, taken=taken, sent=connected)
        err.print(Text(f"interrupted; {fate}"))
        raise typer.Exit(INTERRUPTED) from None


def _end_line(live: LiveReply | None) -> None:
    if live is not None:
        live.finish_line()


def _cli_words(
    refused: ConversationRefused, session: str, user: str, message_id: str, *, taken: bool
) -> str:
    """``refused``'s line for the command line."""
    if refused.error_type == ErrorType.TURN_IN_PROGRESS:
        return refused.message.replace("while_busy ", "--while-busy ")
    if refused.error_type == ErrorType.UNREACHABLE:
        fate = message_fate(session, user, message_id, taken=taken, sent=True)
        return f"{refused.message.rstrip('.')}; {fate}"
    return refused.message


def message_fate(session: str, user: str, message_id: str, *, taken: bool, sent: bool) -> str:
    """What became of the message, and how to check."""
    show = f"`parley show --session {session} --user {user}`"
    if taken:
        return f"your message was taken (its turn had begun): see {show}"
    if not sent:
        return "your message was not sent"
    return (
        f"your message (id {message_id}) may not have reached the conversation: see {show}, "
        f"or send it again with --message-id {message_id} (the same id is never applied "
        "twice)"
    )
