"""Reverting a call that ran: its tool's declared inverse, proposed through the gate.
Client side (never imported by workflows)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.client.conversations import Conversations
from parley.client.errors import checked_user
from parley.contracts import RevertInput, TurnResult
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
