"""An AG-UI client that reconnects: a run with no new input answers with the thread's
messages and its open interrupts. Client side (the gateway).

After a page reload an AG-UI client (``HttpAgent``, CopilotKit) holds no messages and
does not know which calls wait. A ``RunAgentInput`` with no messages and no ``resume``
is that client asking: its stream is ``RUN_STARTED`` (the client's run id),
``MESSAGES_SNAPSHOT`` (the latest page of the transcript, ``parley.contracts``'
``StateQuery`` default: 200 messages, in AG-UI's shapes, each tool result marked
``metadata.parley.revertible`` as a run marks it), and ``RUN_FINISHED``, with
outcome ``interrupt`` and one interrupt per pending call when decisions are owed, so
the client can answer them with ``resume`` as in the run that raised them. Nothing runs
and nothing enters the conversation's history or event log: these events have no
offset. A thread that does not exist, or is another user's, reads as an empty one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.messages import ToolMessage as LangChainToolMessage

from parley.client import ConversationRefused
from parley.contracts import ConversationSnapshot, PendingCall, StateQuery, text_of
from parley.contracts.errors import ErrorType
from parley.gateway.agui_reverts import PARLEY_KEY
from parley.gateway.deps import Gateway
from parley.gateway.errors import refused
from parley.gateway.replay import interrupt_of

#: Events read back from the log for the open interrupts' ``responseSchema``.
RECENT_EVENTS = 1_000


async def reconnect_events(
    gateway: Gateway, session_id: str, user_id: str, run_id: str, groups: Sequence[str] = ()
) -> list[tuple[int | None, dict[str, Any]]]:
    """The reconnecting run's three events, read as ``user_id`` with their verified
    ``groups``. A refusal other than not-found raises its ``ApiError`` (answered before
    any stream)."""
    query = StateQuery(user_id=user_id, groups=sorted(set(groups)))
    try:
        snapshot: ConversationSnapshot | None = await gateway.conversations.state(
            session_id, user_id, query
        )
    except ConversationRefused as refusal:
        if refusal.error_type != ErrorType.NOT_FOUND:
            raise refused(refusal, session_id) from None
        snapshot = None
    messages = agui_messages(snapshot.transcript, set(snapshot.revertible)) if snapshot else []
    pending = snapshot.pending if snapshot else []
    outcome: RunFinishedInterruptOutcome | RunFinishedSuccessOutcome = RunFinishedSuccessOutcome()
    if pending:
        outcome = RunFinishedInterruptOutcome(
            interrupts=await _open_interrupts(gateway, session_id, user_id, pending, groups)
        )
    events = (
        RunStartedEvent(thread_id=session_id, run_id=run_id),
        MessagesSnapshotEvent(messages=messages),
        RunFinishedEvent(thread_id=session_id, run_id=run_id, outcome=outcome),
    )
    return [(None, e.model_dump(mode="json", by_alias=True, exclude_none=True)) for e in events]


async def _open_interrupts(
    gateway: Gateway,
    session_id: str,
    user_id: str,
    pending: list[PendingCall],
    groups: Sequence[str],
) -> list[Interrupt]:
    """Each pending call's interrupt as the run that raised it gave it (with its
    ``responseSchema``), read from the log's latest events; one the log no longer
    holds (or a subagent's, raised by its own run) is made from the pending call."""
    raised: dict[str, dict[str, Any]] = {}
    try:
        conversations = gateway.conversations
        latest = (await conversations.events(session_id, user_id, limit=1, groups=groups)).latest
        page = await conversations.events(
            session_id,
            user_id,
            after=max(-1, latest - RECENT_EVENTS),
            limit=RECENT_EVENTS,
            groups=groups,
        )
    except ConversationRefused:
        page = None
    for item in page.events if page else []:
        if item.event.get("type") == "RUN_FINISHED":
            for interrupt in (item.event.get("outcome") or {}).get("interrupts", []):
                raised[interrupt.get("id")] = interrupt
    return [
        Interrupt.model_validate(raised[call.tool_call_id])
        if call.tool_call_id in raised
        else interrupt_of(call)
        for call in pending
    ]


def agui_messages(transcript: list[AnyMessage], revertible: set[str]) -> list[Message]:
    """The transcript in AG-UI's message shapes: the user's messages, the assistant's
    (with their tool calls) and the tool results (their text, as the model read it),
    each result marked ``metadata.parley.revertible`` as a run's results are
    (``agui_reverts``; ``revertible``: the snapshot's)."""
    out: list[Message] = []
    for message in transcript:
        if isinstance(message, HumanMessage):
            out.append(UserMessage(id=message.id or "", content=text_of(message)))
        elif isinstance(message, AIMessage):
            calls = [
                ToolCall(
                    id=call["id"] or "",
                    type="function",
                    function=FunctionCall(name=call["name"], arguments=json.dumps(call["args"])),
                )
                for call in message.tool_calls
            ]
            out.append(
                AssistantMessage(
                    id=message.id or "",
                    content=text_of(message) or None,
                    tool_calls=calls or None,
                )
            )
        elif isinstance(message, LangChainToolMessage):
            out.append(
                ToolMessage(
                    id=message.id or f"result-{message.tool_call_id}",
                    content=text_of(message),
                    tool_call_id=message.tool_call_id,
                    metadata={PARLEY_KEY: {"revertible": message.tool_call_id in revertible}},
                )
            )
    return out
