"""Approved calls in their undo window, on the command line: the line each one gets
("c1 create_plan runs in 25 s (at 12:00:25 UTC) — undo: parley undo …"), printed by
``parley show`` and, as soon as the decision has scheduled them, by ``parley approve``
and ``parley chat`` while the decision's turn waits out the window. Client side: reads
the conversation's state (``ConversationSnapshot.scheduled``); no workflow logic here.

A decision's update answers only once its turn is over, after the window: so the
command sends it as a task and reads the state meanwhile (``watch_windows``) until each
call it expects in a window is seen there (or the decision has answered).
"""

from __future__ import annotations

import asyncio
import math
import shlex
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from rich.console import Console
from rich.text import Text

from parley.client import ConversationRefused, Conversations
from parley.contracts import ScheduledCall, StateQuery

T = TypeVar("T")

#: How often a command reads the state for the calls its decision scheduled, until it
#: has seen them all (a query to a live worker answers at once).
WATCH_EVERY_SECONDS = 0.5


def undo_command(session: str, user: str, tool_call_id: str | None = None) -> str:
    """``parley undo --session S --user U [--call ID]``, quoted for a shell."""
    line = f"parley undo --session {shlex.quote(session)} --user {shlex.quote(user)}"
    return f"{line} --call {shlex.quote(tool_call_id)}" if tool_call_id else line


def scheduled_line(
    call: ScheduledCall,
    session: str | None,
    user: str | None,
    now: datetime | None = None,
    *,
    owner: str | None = None,
) -> str:
    """One scheduled call: its id, tool, when it runs, and (for ``user``) how to undo it,
    or who may (the approver or ``owner``, when ``user`` is neither); a call already
    undone whose turn has not taken it yet says who undid it."""
    if call.undone_by is not None:
        return f"{call.tool_call_id} {call.name} undone by {call.undone_by}: it will not run"
    now = now or datetime.now(UTC)
    left = max(0, math.ceil((call.runs_at - now).total_seconds()))
    when = f"runs in {left} s (at {call.runs_at.astimezone(UTC):%H:%M:%S} UTC)"
    if session is None or user is None:
        return f"{call.tool_call_id} {call.name} {when}, approved by {call.approved_by}"
    if owner is not None and user not in (owner, call.approved_by, *call.approvers):
        who = ", ".join([*call.approvers, call.approved_by])
        return f"{call.tool_call_id} {call.name} {when} — {who} or {owner} may undo it"
    undo = undo_command(session, user, call.tool_call_id)
    return f"{call.tool_call_id} {call.name} {when} — undo: {undo}"


def print_scheduled(
    scheduled: Sequence[ScheduledCall],
    console: Console,
    *,
    session: str | None = None,
    user: str | None = None,
    owner: str | None = None,
) -> None:
    """The calls waiting out their undo window, under a heading (nothing if none)."""
    if not scheduled:
        return
    console.print(Text("Approved, in their undo window:", style="bold yellow"))
    for call in scheduled:
        console.print(Text(f"  {scheduled_line(call, session, user, owner=owner)}"))


async def watch_windows(
    conversations: Conversations,
    session: str,
    user: str,
    expected: Collection[str],
    deciding: Callable[[], Awaitable[T]],
    console: Console,
    *,
    note: str | None = None,
) -> T:
    """``deciding()`` (a decision's update), while the calls of ``expected`` (ids whose
    rule gives them an undo window) are printed, each once, as soon as the state shows
    them scheduled (with ``note`` under each: chat's own way to undo it). Nothing
    expected: just ``deciding()``."""
    if not expected:
        return await deciding()
    task: asyncio.Task[T] = asyncio.ensure_future(deciding())
    shown: set[str] = set()
    query = StateQuery(user_id=user, transcript_limit=0, audit_limit=0)
    try:
        while not task.done() and not set(expected) <= shown:
            try:
                state = await conversations.state(session, user, query)
            except ConversationRefused:
                break  # the decision's own answer says what is wrong
            for call in state.scheduled:
                if call.tool_call_id in expected and call.tool_call_id not in shown:
                    shown.add(call.tool_call_id)
                    console.print(Text(scheduled_line(call, session, user)))
                    if note:
                        console.print(Text(note, style="dim"))
            await asyncio.wait({task}, timeout=WATCH_EVERY_SECONDS)
    except BaseException:
        task.cancel()  # Ctrl-C: stop waiting (the decision goes on in Temporal)
        raise
    return await task
