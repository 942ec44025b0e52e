"""Reverting a call that ran: its tool's declared inverse, proposed through the gate;
and which results of a transcript a revert may take back, for the surfaces that offer
one (``parley chat``'s ``/revert``, AG-UI's result metadata); and the calls one undo
may name (``undo_calls``). Client side (never imported by workflows)."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import ToolMessage

from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused, checked_user
from parley.contracts import ConversationSnapshot, RevertInput, TurnResult
from parley.contracts.errors import ErrorType
from parley.contracts.undo import MAX_UNDO_CALLS
from parley.workflows.conversation import ConversationWorkflow


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


def revertible_results(snapshot: ConversationSnapshot) -> list[tuple[int, ToolMessage]]:
    """The results in the snapshot's page that a revert may take back (the workflow's
    ``revertible``: what its ``revert`` validator would take), each with its number in
    the transcript (from 1, as ``parley show`` numbers it)."""
    revertible = set(snapshot.revertible)
    return [
        (snapshot.transcript_offset + index + 1, message)
        for index, message in enumerate(snapshot.transcript)
        if isinstance(message, ToolMessage) and message.tool_call_id in revertible
    ]
