"""``parley chat``: an interactive conversation in the terminal. Client side.

Messages go through ``send``; when calls wait for a decision, each is shown with its
arguments and the user answers approve / edit / reject / respond; all decisions go to
the workflow at once. Reads plain lines from stdin, so it can be scripted too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rich.console import Console
from rich.markup import escape

from parley.client import ConversationRefused, Conversations, check_identity, connect
from parley.contracts import Decision, PendingCall, TurnResult
from parley.settings import Settings

ACTIONS = {"a": "approve", "e": "edit", "r": "reject", "s": "respond"}


class _Closed(Exception):
    """Standard input ended."""


async def _ask(prompt: str) -> str:
    try:
        return (await asyncio.to_thread(input, prompt)).strip()
    except EOFError:
        raise _Closed from None


async def run_chat(session: str, user: str, settings: Settings, *, console: Console) -> None:
    check_identity(session, user)
    conversations = Conversations(await connect(settings), settings)
    console.print(
        f"Chatting in [bold]{escape(session)}[/] as {escape(user)}. "
        "/quit leaves, /show shows the state."
    )
    pending = await _pending_on_resume(conversations, session, user)
    try:
        while True:
            if pending:
                result = await _decide_all(conversations, session, user, pending, console)
            else:
                text = await _ask("you> ")
                if text in ("/quit", "/exit"):
                    return
                if text == "/show":
                    state = await conversations.state(session, user)
                    console.print(f"status {state.status}, {len(state.transcript)} messages")
                    continue
                if not text:
                    continue
                try:
                    result = await conversations.send(session, user, text)
                except ConversationRefused as refused:
                    console.print(f"[red]refused:[/] {escape(refused.message)}", highlight=False)
                    continue
            _show(result, console)
            pending = result.pending
    except _Closed:
        return


async def _pending_on_resume(conv: Conversations, session: str, user: str) -> list[PendingCall]:
    try:
        return (await conv.state(session, user)).pending
    except ConversationRefused as refused:
        if refused.error_type == "NotFound":
            return []
        raise


async def _decide_all(
    conv: Conversations, session: str, user: str, pending: list[PendingCall], console: Console
) -> TurnResult:
    while True:
        decisions = [await _decision_for(call, console) for call in pending]
        try:
            return await conv.decide(session, user, decisions)
        except ConversationRefused as refused:
            console.print(f"[red]refused:[/] {escape(refused.message)}", highlight=False)
            if refused.error_type != "InvalidDecision":
                raise


async def _decision_for(call: PendingCall, console: Console) -> Decision:
    console.print(
        f"[bold yellow]{call.name}[/] ({escape(call.tool_call_id)}) wants to run with "
        + escape(json.dumps(call.args, ensure_ascii=False)),
        highlight=False,
    )
    while True:
        answer = (await _ask("approve / edit / reject / respond? ")).lower()
        action = ACTIONS.get(answer[:1]) if answer else None
        if action is None or not action.startswith(answer):
            console.print("Please answer approve, edit, reject or respond.")
            continue
        if action == "edit":
            args = await _ask_json("new args (JSON object): ", console)
            return Decision(tool_call_id=call.tool_call_id, action="edit", args=args)
        if action == "reject":
            reason = await _ask("reason (optional): ")
            return Decision(tool_call_id=call.tool_call_id, action="reject", message=reason or None)
        if action == "respond":
            message = ""
            while not message:
                message = await _ask("your answer for the model: ")
            return Decision(tool_call_id=call.tool_call_id, action="respond", message=message)
        return Decision(tool_call_id=call.tool_call_id, action="approve")


async def _ask_json(prompt: str, console: Console) -> dict[str, Any]:
    while True:
        raw = await _ask(prompt)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as problem:
            console.print(escape(f"not JSON: {problem.msg}; try again"))
            continue
        if isinstance(value, dict):
            return value
        console.print('a JSON object is needed, e.g. {"title": "Q3 review"}')


def _show(result: TurnResult, console: Console) -> None:
    for item in result.results:
        console.print(
            escape(f"  [{item.status}] {item.name}: {item.content[:1000]}"), highlight=False
        )
    if result.reply:
        console.print(escape(f"parley> {result.reply}"), highlight=False)
    if result.status == "failed":
        console.print(f"[red]turn failed:[/] {escape(result.error or '')}", highlight=False)
