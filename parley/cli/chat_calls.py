"""``parley chat``'s commands on calls: ``/revert`` (a call that ran, taken back by its
tool's declared inverse) and ``/undo`` (approved calls still in their undo window), and
the chat's ``/help``. Client side: each is one call through ``parley.client``.

``/revert`` alone lists the calls that ran here and may be reverted, each with its
message's number (the numbers ``/show`` prints); ``/revert N`` takes back the call whose
result (or whose lone proposal) is message N, ``/revert ID`` the call ``ID``. Parley
proposes the inverse, and chat asks for its decision like any pending call. ``/undo``
takes back every call of yours in its undo window, ``/undo ID`` that one; chat reads it
while a decision's turn waits out the window, too. A refusal (no inverse, a run that
changed nothing, an unknown id, nothing to undo) is the workflow's one line.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, ToolMessage
from rich.console import Console
from rich.text import Text

from parley.client import Conversations
from parley.client.reverts import revertible_results, undo_calls
from parley.contracts import StateQuery

#: ``/help``: each command of the chat and what it does.
CHAT_HELP = (
    ("/show", "print the conversation (its latest messages, numbered)"),
    ("/revert", "list the calls that ran here and can be reverted, with their numbers"),
    (
        "/revert N|ID",
        "propose the inverse of a call that ran (message N of /show, or its call id); "
        "it waits for your decision like any call",
    ),
    (
        "/undo [ID]",
        "take back approved calls still in their undo window (all of yours, or ID): "
        "they never run; works while chat waits out the window",
    ),
    ("/enqueue [TEXT]", "send the line refused while a turn ran (or TEXT) as the next turn"),
    ("/interrupt [TEXT]", "send it (or TEXT) into the turn in flight"),
    ("/help", "this list"),
    ("/quit", "leave (or Ctrl-D, or Ctrl-C)"),
)
#: Printed under a call that waits out its undo window while chat waits with it.
UNDO_HERE = "    (type /undo here to take it back before it runs)"


def print_help(console: Console) -> None:
    width = max(len(command) for command, _ in CHAT_HELP)
    for command, does in CHAT_HELP:
        console.print(Text(f"  {command:<{width}}  {does}"))


class CallCommands:
    """``/revert`` and ``/undo`` for one chat's conversation and user."""

    def __init__(
        self, conversations: Conversations, session: str, user: str, console: Console
    ) -> None:
        self._conv = conversations
        self._session = session
        self._user = user
        self._console = console

    async def revert_target(self, argument: str) -> str | None:
        """The call ``/revert ARGUMENT`` names (a number: the call of that message), or
        None when there is nothing to send: the list is printed (no argument), or why
        the number names no call."""
        if not argument:
            await self._list_revertible()
            return None
        if not argument.isdigit():
            return argument
        number = int(argument)
        query = StateQuery(
            user_id=self._user,
            transcript_offset=max(number - 1, 0),
            transcript_limit=1,
            audit_limit=0,
        )
        snapshot = await self._conv.state(self._session, self._user, query)
        here = number >= 1 and snapshot.transcript and snapshot.transcript_offset == number - 1
        message = snapshot.transcript[0] if here else None
        if isinstance(message, ToolMessage):
            return message.tool_call_id
        if isinstance(message, AIMessage) and len(message.tool_calls) == 1:
            return str(message.tool_calls[0]["id"])
        what = "is not a tool call's result" if here else "is not in this conversation"
        self._say(f"message {number} {what}: /revert lists the calls you can revert")
        return None

    async def _list_revertible(self) -> None:
        query = StateQuery(user_id=self._user, audit_limit=0)
        found = revertible_results(await self._conv.state(self._session, self._user, query))
        if not found:
            self._say(
                "nothing to revert: no call among the latest messages ran here (not in "
                "the conversation this one was forked from) with a tool that declares an "
                "inverse and was not reverted already"
            )
            return
        self._say("Calls you can revert (/revert NUMBER or /revert CALL_ID):")
        width = len(str(found[-1][0]))
        for number, result in found:
            self._say(f"  {number:>{width}}  {result.name} ({result.tool_call_id})")

    async def undo(self, argument: str) -> None:
        """``/undo [ID…]``: the calls undone, one line each; a refusal raises
        ``ConversationRefused``."""
        query = StateQuery(user_id=self._user, transcript_limit=0, audit_limit=0)
        waiting = (await self._conv.state(self._session, self._user, query)).scheduled
        ids = undo_calls(argument.split())
        undone = (await self._conv.undo(self._session, self._user, ids)).undone
        names = {s.tool_call_id: s.name for s in waiting}
        for call_id in undone:
            name = f" {names[call_id]}" if call_id in names else ""
            self._say(f"undone: {call_id}{name} will not run (the model is told)")

    def _say(self, line: str) -> None:
        self._console.print(Text(line))
