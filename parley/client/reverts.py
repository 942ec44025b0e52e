"""Reverting a call that ran: its tool's declared inverse, proposed through the gate;
and which results of a transcript a revert may take back, for the surfaces that offer
one (``parley chat``'s ``/revert``, AG-UI's result metadata); and the calls one undo
may name (``undo_calls``). Client side (never imported by workflows)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage

from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused, checked_user
from parley.contracts import ConversationSnapshot, RevertInput, TurnResult
from parley.contracts.errors import ErrorType
from parley.contracts.undo import MAX_UNDO_CALLS
from parley.workflows.conversation import ConversationWorkflow
from parley.workflows.turn.reverts import REVERT_PREFIX


async def revert(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    tool_call_id: str,
    groups: Sequence[str] = (),
) -> TurnResult:
    """Propose the inverse of ``tool_call_id`` (a call that ran here): the turn's
    result, where the inverse ran, waits for a decision, or was refused by a rule. A call
    whose tool declares no inverse, or whose run changed nothing, is refused, saying so
    (``ConversationRefused``)."""
    request = RevertInput(
        user_id=checked_user(user_id), tool_call_id=tool_call_id, groups=sorted(set(groups))
    )
    return await conversations.ending_update(
        session_id,
        ConversationWorkflow.revert,
        request,
        "A revert needs a running worker; run it again once one is running.",
    )


def undo_calls(call_ids: Sequence[str]) -> list[str]:
    """The calls an undo names (``parley undo``, ``/undo``), refused in one line when one
    undo cannot take them all."""
    ids = list(call_ids)
    if len(ids) > MAX_UNDO_CALLS:
        raise ConversationRefused(
            f"an undo names at most {MAX_UNDO_CALLS} calls, not {len(ids)}: undo them in "
            "parts, or name none to undo every call you may",
            ErrorType.INVALID_DECISION,
        )
    return ids


def may_revert(
    tool_call_id: str, name: str, status: Any, tools: Collection[str], proposed: Collection[str]
) -> bool:
    """Whether a revert of this result may be proposed: it succeeded, its tool declares
    an inverse (``tools``: the snapshot's ``revertible_tools``), it is no inverse itself,
    and its inverse was not proposed yet (``proposed``: the call ids proposed so far).
    Whether the run changed anything only the worker knows: a revert says so."""
    return (
        status == "success"
        and name in tools
        and not tool_call_id.startswith(REVERT_PREFIX)
        and REVERT_PREFIX + tool_call_id not in proposed
    )


def proposed_calls(snapshot: ConversationSnapshot) -> dict[str, str]:
    """The tool calls proposed in the snapshot's page of the transcript: name by id."""
    return {
        call["id"]: call["name"]
        for message in snapshot.transcript
        if isinstance(message, AIMessage)
        for call in message.tool_calls
        if call.get("id")
    }


def revertible_results(snapshot: ConversationSnapshot) -> list[tuple[int, ToolMessage]]:
    """The results in the snapshot's page that a revert may take back, each with its
    number in the transcript (from 1, as ``parley show`` numbers it)."""
    proposed = proposed_calls(snapshot)
    found = []
    for index, message in enumerate(snapshot.transcript):
        if not isinstance(message, ToolMessage):
            continue
        artifact = message.artifact if isinstance(message.artifact, dict) else {}
        name = message.name or proposed.get(message.tool_call_id, "")
        status = artifact.get("status") or message.status
        if may_revert(message.tool_call_id, name, status, snapshot.revertible_tools, proposed):
            found.append((snapshot.transcript_offset + index + 1, message))
    return found
