"""A tool result read whole: what ``parley result`` and
``GET /v1/conversations/{id}/results/{call_id}`` give. Client side (never imported by
workflows).

The model reads a long result's first ``MODEL_RESULT_MAX_CHARS`` characters, and the
transcript (``parley show``, the page) holds what the model read; a turn's result and
its events hold shorter previews. The worker keeps such a result whole in the payload
store (``parley.storage.results``) and the result's message says where (its artifact's
``stored``), so any host that shares the store reads it back. Reading it is a read of the
conversation: the result's message is found through the ``state`` query (owner and
reviewers only) or the stored transcript chain. A result the store no longer has is
``DeletedByRetention`` (410 in the gateway) when retention deleted it, as every stored
read is (``parley.client.stored``).
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import AnyMessage, ToolMessage

from parley.client.conversations import Conversations
from parley.client.errors import ConversationRefused
from parley.client.stored import stored_messages, unreadable_stored
from parley.contracts import StateQuery, StoredResult, ToolResult
from parley.contracts.errors import ErrorType
from parley.storage import driver_of
from parley.storage.results import WholeResults

#: How ``model_view`` marks a result it cut for the model (``parley.contracts.limits``).
CUT_NOTE = "\n\n[Parley: this result is "


@dataclass(frozen=True)
class WholeResult:
    """One call's result, whole: its envelope (status, content, payload, error)."""

    tool_call_id: str
    name: str
    result: ToolResult


async def whole_result(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    call_id: str,
    groups: tuple[str, ...] = (),
) -> WholeResult:
    """The whole result of call ``call_id`` of conversation ``session_id``, as
    ``user_id`` (its owner or a reviewer, also through one of ``groups``) may read it."""
    query = StateQuery(user_id=user_id, audit_limit=0, groups=list(groups))
    snapshot = await conversations.state(session_id, user_id, query)
    message = _result_message(snapshot.transcript, call_id)
    if message is None and snapshot.model_context is not None and snapshot.transcript_offset:
        older = await stored_messages(
            conversations.temporal,
            session_id,
            snapshot.model_context,
            snapshot.transcript_offset,
            "the later ones are still read (parley show)",
        )
        message = _result_message(older, call_id)
    if message is None:
        raise ConversationRefused(
            f"conversation {session_id} has no result of call {call_id} (parley show lists "
            "each result with its call id)",
            ErrorType.NOT_FOUND,
        )
    artifact = message.artifact if isinstance(message.artifact, dict) else {}
    name = message.name or "tool"
    if artifact.get("stored") is None:
        text = message.text
        if CUT_NOTE in text:
            raise ConversationRefused(
                f"only the beginning of the result of call {call_id} was kept in conversation "
                f"{session_id} (it ran before Parley kept whole results); the whole of it is "
                f"run_tool's result in the conversation's Temporal history: temporal workflow "
                f"show -w conversation-{session_id} --output json",
                ErrorType.NOT_FOUND,
            )
        status = artifact.get("status") or ("success" if message.status == "success" else "error")
        envelope = ToolResult.model_validate(
            {"status": status, "content": text, "payload": artifact.get("payload")}
        )
        return WholeResult(call_id, name, envelope)
    stored = StoredResult.model_validate(artifact["stored"])
    temporal = conversations.temporal
    try:
        result = await WholeResults(driver_of(temporal.data_converter)).read(stored)
    except ValueError as problem:
        raise await unreadable_stored(
            temporal,
            session_id,
            problem,
            f"the whole result of call {call_id} of conversation {session_id}",
            "its beginning, as the model read it, is still in parley show",
        ) from None
    return WholeResult(call_id, name, result)


def _result_message(messages: list[AnyMessage], call_id: str) -> ToolMessage | None:
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
            return message
    return None
