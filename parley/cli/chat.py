"""``parley chat``: an interactive conversation in the terminal. Client side.

Messages go through ``send``; when calls wait for a decision, each is shown with its
whole arguments and the user answers approve / edit / reject / respond (or a / e / r /
s); all decisions go to the workflow at once. An approved call whose rule gives it an
undo window is printed as soon as it is scheduled ("runs in 25 s … undo: parley undo
…"), and chat waits out the window with its turn, reading on meanwhile: ``/undo`` takes
the call back there and then (any other line waits for the next prompt). ``/revert``
proposes the inverse of a call that ran, asked for like any pending call
(``parley.cli.chat_calls``). ``/show`` prints the conversation, ``/help`` lists the
commands, ``/quit`` (or end of input, or Ctrl-C) leaves. Reads plain lines from stdin
(``parley.cli.chat_input``), so it can be scripted too.

A line sent while a turn runs (one started elsewhere, or before chat was left with
Ctrl-C) is refused, unless chat runs with ``--while-busy``; the refusal offers
``/enqueue`` (the line becomes the next turn) and ``/interrupt`` (it joins the turn in
flight), each of which sends the refused line again, or the text after it. Only this
chat's own turn is printed as it streams (``parley.cli.live_reply.OwnRun``).

Prompts are read in the main thread, between calls to Temporal (each one run to its end
on one event loop): Ctrl-C at a prompt leaves at once, and Ctrl-C while a turn runs
stops waiting for it (the turn goes on in Temporal).
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

from rich.console import Console
from rich.text import Text

from parley.cli.chat_calls import UNDO_HERE, CallCommands, print_help
from parley.cli.chat_input import LineInput
from parley.cli.following import message_fate
from parley.cli.live_reply import LiveReply, OwnRun, new_run_id, send_following
from parley.cli.rendering import (
    print_call,
    print_snapshot,
    render_turn,
)
from parley.cli.schedule import watch_windows
from parley.client import ConversationRefused, Conversations, check_identity, connect
from parley.client.reverts import revert
from parley.config.settings import Settings
from parley.contracts import Decision, DecisionAction, PendingCall, StateQuery, TurnResult
from parley.contracts.errors import ErrorType

T = TypeVar("T")

#: One-letter answers to an approval prompt. A longer answer is a decision's name or an
#: unambiguous beginning of one ("app", "rej", "res").
SHORTCUTS: dict[str, DecisionAction] = {"a": "approve", "e": "edit", "r": "reject", "s": "respond"}
DECISIONS: tuple[DecisionAction, ...] = ("approve", "edit", "reject", "respond")
ASK_DECISION = "approve, edit, reject or respond? [a/e/r/s] "
#: How many of the latest messages ``/show`` prints.
SHOWN_MESSAGES = 20
#: The exit status of a program stopped with Ctrl-C (128 + SIGINT).
INTERRUPTED = 130
#: The commands that send a line with a ``while_busy`` of their own.
BUSY_COMMANDS = {"/enqueue": "enqueue", "/interrupt": "interrupt"}
#: The descriptor chat reads its lines from (``LineInput``).
STDIN = 0
BUSY_HINT = (
    "/enqueue sends it as the next turn, /interrupt sends it into the turn in flight "
    "(or /enqueue TEXT, /interrupt TEXT)"
)


class _Closed(Exception):
    """Standard input ended, or the user asked to leave."""


def parse_decision(answer: str) -> DecisionAction | None:
    """``a``/``e``/``r``/``s``, a decision's name, or an unambiguous beginning of one."""
    answer = answer.strip().lower()
    if answer in SHORTCUTS:
        return SHORTCUTS[answer]
    if len(answer) < 2:
        return None
    matches = [name for name in DECISIONS if name.startswith(answer)]
    return matches[0] if len(matches) == 1 else None


def run_chat(
    session: str,
    user: str,
    settings: Settings,
    *,
    console: Console,
    while_busy: str | None = None,
) -> int:
    """Chat until /quit, end of input or Ctrl-C; returns the exit status. ``while_busy``:
    what every line does if a turn is running (None: the conversation's default)."""
    check_identity(session, user)
    with asyncio.Runner() as runner:
        try:
            return _Chat(runner, session, user, settings, console, while_busy).run()
        except KeyboardInterrupt:
            console.print()
            console.print(
                Text("interrupted; a turn under way goes on in Temporal (see parley show)")
            )
            return INTERRUPTED


class _Chat:
    def __init__(
        self,
        runner: asyncio.Runner,
        session: str,
        user: str,
        settings: Settings,
        console: Console,
        while_busy: str | None = None,
    ) -> None:
        self._runner = runner
        self._session = session
        self._user = user
        self._console = console
        self._while_busy = while_busy
        #: The last line refused because a turn was running (``/enqueue`` sends it).
        self._refused_line: str | None = None
        self._conv = Conversations(self._call(connect(settings)), settings)
        self._input = LineInput(STDIN, console.file)
        self._calls = CallCommands(self._conv, session, user, console)

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run one call to Temporal to its end (Ctrl-C stops it: KeyboardInterrupt)."""
        return self._runner.run(work)

    def _ask(self, prompt: str) -> str:
        try:
            return self._input.ask(prompt).strip()
        except EOFError:
            raise _Closed from None

    def run(self) -> int:
        self._console.print(
            Text.assemble(
                "Chatting in ",
                (self._session, "bold"),
                f" as {self._user}. /show shows the conversation, /help lists the "
                "commands, /quit leaves.",
            )
        )
        try:
            pending = self._pending()
            while True:
                live = LiveReply(self._console.file)
                if pending:
                    result = self._decide_all(pending, live)
                else:
                    text = self._ask("you> ")
                    if text in ("/quit", "/exit"):
                        return 0
                    answer = self._answer(text, live)
                    if not isinstance(answer, TurnResult):
                        pending = answer  # nothing ran: the calls that wait, if any
                        continue
                    result = answer
                render_turn(result, self._console, reply_streamed=live.streamed_whole(result.reply))
                if result.status == "failed":
                    self._console.print(Text.assemble(("turn failed: ", "red"), result.error or ""))
                pending = result.pending
        except _Closed:
            return 0

    def _answer(self, text: str, live: LiveReply) -> TurnResult | list[PendingCall]:
        """What a line at the ``you>`` prompt does: a command, or a message sent. The
        turn it ran, else the calls that wait for a decision (none, mostly)."""
        if text == "/show":
            self._show()
            return []
        if text == "/help":
            print_help(self._console)
            return []
        if not text:
            return []
        command, _, argument = text.partition(" ")
        if command in ("/revert", "/undo"):
            return self._on_calls(command, argument.strip(), live)
        text, while_busy = self._busy_command(text)
        if not text:
            return []
        try:
            result = self._call(self._send(text, live, while_busy))
        except ConversationRefused as refused:
            live.finish_line()
            self._refused(refused)
            if refused.error_type == ErrorType.TURN_IN_PROGRESS:
                self._refused_line = text
                self._console.print(Text(BUSY_HINT))
            if refused.error_type == ErrorType.DECISIONS_OWED:
                return self._pending()
            return []
        self._refused_line = None
        return result

    def _on_calls(
        self, command: str, argument: str, live: LiveReply
    ) -> TurnResult | list[PendingCall]:
        """``/revert`` (the turn that proposes the inverse, which then waits for its
        decision like any call) and ``/undo``; a refusal is its one line."""
        try:
            if command == "/undo":
                self._call(self._calls.undo(argument))
                return []
            call_id = self._call(self._calls.revert_target(argument))
            if call_id is None:
                return []
            return self._call(
                send_following(
                    self._conv,
                    self._session,
                    self._user,
                    lambda: revert(self._conv, self._session, self._user, call_id),
                    live,
                )
            )
        except ConversationRefused as refused:
            live.finish_line()
            self._refused(refused)
            if refused.error_type == ErrorType.DECISIONS_OWED:
                return self._pending()
            return []

    def _busy_command(self, text: str) -> tuple[str, str | None]:
        """The line to send and its ``while_busy``: ``/enqueue`` and ``/interrupt`` send
        the text after them, else the line refused last; any other line, chat's own."""
        command, _, rest = text.partition(" ")
        if command not in BUSY_COMMANDS:
            return text, self._while_busy
        line = rest.strip() or self._refused_line or ""
        if not line:
            self._console.print(Text(f"{command} TEXT sends TEXT; no refused line to send"))
        return line, BUSY_COMMANDS[command]

    async def _send(self, text: str, live: LiveReply, while_busy: str | None) -> TurnResult:
        """Send ``text``; the reply's text of its own turn is written as it streams."""
        message_id, run_id = uuid.uuid4().hex[:16], new_run_id()
        own = OwnRun(run_id, message_id)
        try:
            return await send_following(
                self._conv,
                self._session,
                self._user,
                lambda: self._conv.send(
                    self._session,
                    self._user,
                    text,
                    message_id=message_id,
                    while_busy=while_busy,  # type: ignore[arg-type]
                    run={"run_id": run_id},
                ),
                live,
                own=own,
            )
        except ConversationRefused as refused:
            if refused.error_type != ErrorType.UNREACHABLE:
                raise
            live.finish_line()
            taken = own.inside or own.ended
            fate = message_fate(self._session, self._user, message_id, taken=taken, sent=True)
            raise ConversationRefused(f"{refused.message}; {fate}", refused.error_type) from None

    def _refused(self, refused: ConversationRefused) -> None:
        self._console.print(Text.assemble(("refused: ", "red"), refused.message))

    def _pending(self) -> list[PendingCall]:
        try:
            return self._call(self._conv.state(self._session, self._user)).pending
        except ConversationRefused as refused:
            if refused.error_type == ErrorType.NOT_FOUND:
                return []
            raise

    def _show(self) -> None:
        query = StateQuery(user_id=self._user, transcript_limit=SHOWN_MESSAGES, audit_limit=0)
        try:
            snapshot = self._call(self._conv.state(self._session, self._user, query))
        except ConversationRefused as refused:
            if refused.error_type != ErrorType.NOT_FOUND:
                raise
            self._console.print(Text(f"no conversation {self._session} yet: say something"))
            return
        print_snapshot(snapshot, self._console, audit=False, hint=False)

    def _decide_all(self, pending: list[PendingCall], live: LiveReply) -> TurnResult:
        """Ask for every pending call's decision and send them at once; the reply that
        follows is written as it streams."""
        while True:
            decisions = [self._decision_for(call) for call in pending]
            # A call with an undo window is printed as soon as it is scheduled, with how
            # to undo it; the turn waits out the window, and chat reads ``/undo`` meanwhile.
            windows = {c.tool_call_id for c in pending if c.undo_seconds}
            runs = [d.tool_call_id for d in decisions if d.action in ("approve", "edit")]
            windowed = [i for i in runs if i in windows]
            deciding = functools.partial(
                send_following,
                self._conv,
                self._session,
                self._user,
                functools.partial(self._conv.decide, self._session, self._user, decisions),
                live,
            )
            try:
                return self._call(
                    self._undoable(
                        watch_windows(
                            self._conv,
                            self._session,
                            self._user,
                            windowed,
                            deciding,
                            self._console,
                            note=UNDO_HERE,
                        ),
                        reading=bool(windowed),
                    )
                )
            except ConversationRefused as refused:
                self._refused(refused)
                if refused.error_type != ErrorType.INVALID_DECISION:
                    raise
                # Read them again: a call whose preview changed is asked with the new one.
                pending = self._pending() or pending

    async def _undoable(self, deciding: Awaitable[T], *, reading: bool) -> T:
        """``deciding`` (a decision's turn); while it waits out an undo window
        (``reading``), lines are read as they come: ``/undo`` acts at once, any other
        line waits for the next prompt."""
        if not reading:
            return await deciding
        task = asyncio.ensure_future(deciding)
        try:
            while not task.done():
                line = asyncio.ensure_future(self._input.next_line())
                await asyncio.wait({task, line}, return_when=asyncio.FIRST_COMPLETED)
                if not line.done():
                    line.cancel()
                    await asyncio.wait({line})
                    break
                text = line.result()
                if text is None:
                    break  # input ended: the turn is waited for, then chat leaves
                command, _, argument = text.strip().partition(" ")
                if command != "/undo":
                    self._input.hold(text)
                    continue
                try:
                    await self._calls.undo(argument.strip())
                except ConversationRefused as refused:
                    self._refused(refused)
            return await task
        except BaseException:
            task.cancel()  # Ctrl-C: stop waiting (the decision goes on in Temporal)
            raise

    def _decision_for(self, call: PendingCall) -> Decision:
        self._console.print(Text("Waiting for your decision:", style="bold yellow"))
        print_call(call, self._console)
        while True:
            answer = self._ask(ASK_DECISION)
            if answer in ("/quit", "/exit"):
                raise _Closed
            if answer == "/show":
                self._show()
                continue
            action = parse_decision(answer)
            if action is None:
                self._console.print(
                    Text("Please answer approve, edit, reject or respond (or a, e, r, s).")
                )
                continue
            if action == "edit":
                args = self._ask_json("new args (JSON object): ")
                return Decision(tool_call_id=call.tool_call_id, action="edit", args=args)
            if action == "reject":
                reason = self._ask("reason (optional): ")
                return Decision(
                    tool_call_id=call.tool_call_id, action="reject", message=reason or None
                )
            if action == "respond":
                message = ""
                while not message:
                    message = self._ask("your answer for the model: ")
                return Decision(tool_call_id=call.tool_call_id, action="respond", message=message)
            return Decision(  # of the arguments and the preview just printed
                tool_call_id=call.tool_call_id,
                action="approve",
                args_hash=call.args_hash or None,
                preview_hash=call.preview.hash if call.preview is not None else None,
            )

    def _ask_json(self, prompt: str) -> dict[str, Any]:
        while True:
            raw = self._ask(prompt)
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as problem:
                self._console.print(Text(f"not JSON: {problem.msg}; try again"))
                continue
            if isinstance(value, dict):
                return value
            self._console.print(Text('a JSON object is needed, e.g. {"title": "Q3 review"}'))
