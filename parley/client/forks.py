"""Fork and rewind a conversation: go on from its first N messages, in a new conversation
(:func:`fork`) or in the same one as a new run (:func:`rewind`). Client side (never
imported by workflows).

Both read the conversation's messages from its transcript chain (``parley.storage``, as
``Conversations.transcript`` does), so they work however long it is; refuse a cut that
would leave the model a tool call without its answer (``parley.contracts.cuts``,
naming the nearest cuts that do not) before writing anything; then store the first N
messages as one segment of the chain, under the conversation that will read it. The
workflow's input carries the segment's reference and the last few of the N messages
(bounded like the state it keeps), never the whole transcript. Nothing runs again: the
messages are copied, tools' results included.

What retention deleted cannot be copied: a conversation whose older messages went is
refused (``DeletedByRetention``, saying when; ``parley.client.stored``). One the workflow
still keeps whole is read from its pages alone, whatever the store holds.

Only the conversation's owner may fork or rewind it. A fork's session id must be new:
it is started with ``REJECT_DUPLICATE`` as a conversation's first message is, so an
existing or ended conversation is never overwritten.
"""

from __future__ import annotations

from langchain_core.messages import AnyMessage
from pydantic import BaseModel
from temporalio.client import WorkflowExecutionDescription
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from parley.client.conversations import Conversations
from parley.client.errors import (
    OPEN_STATUSES,
    ConversationRefused,
    checked_user,
    checked_workflow_id,
    refusal_of,
)
from parley.client.starts import conversation_start, start_options
from parley.client.stored import stored_messages
from parley.contracts import (
    KEPT_TRANSCRIPT_CHARS,
    KEPT_TRANSCRIPT_MESSAGES,
    PARLEY_REVIEWERS,
    PARLEY_USER,
    ContextRef,
    ConversationSnapshot,
    StateQuery,
    message_chars,
)
from parley.contracts.conversation import RewindInput, TranscriptCut
from parley.contracts.cuts import cut_refusal
from parley.contracts.errors import NOT_OWNER_MESSAGE, ErrorType
from parley.contracts.state import ForkOrigin
from parley.storage import TranscriptStore, driver_of
from parley.workflows.conversation import ConversationWorkflow


class Forked(BaseModel):
    """A conversation started from another one's first ``at`` messages."""

    session_id: str
    forked_from: str
    at: int
    #: The run of ``forked_from`` the messages were read from (its history stays).
    from_run_id: str


class Rewound(BaseModel):
    """A conversation cut to its first ``to`` messages, going on in a new run."""

    session_id: str
    to: int
    #: The run that holds the whole history before the rewind (``temporal workflow show
    #: --run-id``).
    previous_run_id: str


async def fork(
    conversations: Conversations, session_id: str, user_id: str, at: int, as_session: str
) -> Forked:
    """Start conversation ``as_session`` with the first ``at`` messages of
    ``session_id``, its reviewers, and nothing pending; its audit log's first entry
    (``forked``) names the conversation, the message and the run it came from."""
    user_id = checked_user(user_id)
    checked_workflow_id(session_id, subagent=False)
    target_id = checked_workflow_id(as_session, subagent=False)
    description = await _owned(conversations, session_id, user_id)
    if await _exists(conversations, as_session):
        raise _taken(as_session)
    head, messages = await _read(conversations, session_id, user_id)
    context, tail = await _stored_cut(conversations, head, messages, at, target_id)
    settings = conversations.settings
    reviewers = sorted(description.typed_search_attributes.get(PARLEY_REVIEWERS) or [])
    origin = ForkOrigin(
        session_id=session_id,
        run_id=description.run_id or "",
        cut=TranscriptCut(at=at, context=context, tail=tail),
    )
    start = conversation_start(settings, as_session, user_id, reviewers, forked_from=origin)
    try:
        await conversations.temporal.start_workflow(
            ConversationWorkflow.run,
            start,
            **start_options(
                settings,
                target_id,
                start,
                conflict=WorkflowIDConflictPolicy.FAIL,
                summary=f"Parley conversation {as_session}, forked from {session_id}",
            ),
        )
    except WorkflowAlreadyStartedError as err:
        raise _taken(as_session) from err
    except RPCError as err:
        raise await refusal_of(err, as_session, conversations.handle(as_session)) from err
    return Forked(
        session_id=as_session, forked_from=session_id, at=at, from_run_id=description.run_id or ""
    )


async def rewind(conversations: Conversations, session_id: str, user_id: str, to: int) -> Rewound:
    """Keep the first ``to`` messages of ``session_id`` and go on from there, as a new
    run of its workflow (continue-as-new): the run before keeps the whole history.
    Refused while a turn runs, while decisions are owed, and once it has ended."""
    user_id = checked_user(user_id)
    workflow_id = checked_workflow_id(session_id, subagent=False)
    description = await _owned(conversations, session_id, user_id)
    if description.status not in OPEN_STATUSES:
        raise ConversationRefused(
            f"conversation {session_id} has ended: it cannot be rewound; fork it into a new "
            "session instead (parley fork)",
            ErrorType.CONVERSATION_ENDED,
        )
    head, messages = await _read(conversations, session_id, user_id)
    if head.pending:  # refused by the workflow too; said before anything is stored
        ids = ", ".join(call.tool_call_id for call in head.pending)
        raise ConversationRefused(
            f"decisions are owed on calls {ids}: decide them first (a rewind never drops a "
            "call someone may be deciding on)",
            ErrorType.DECISIONS_OWED,
        )
    context, tail = await _stored_cut(conversations, head, messages, to, workflow_id)
    request = RewindInput(
        user_id=user_id,
        # The workflow holds the kept messages itself unless they are older than its own.
        cut=TranscriptCut(at=to, context=context, tail=tail if to < head.transcript_offset else []),
        seen_length=head.transcript_total,
        seen_context=head.model_context,
    )
    snapshot = await conversations.ending_update(
        session_id,
        ConversationWorkflow.rewind,
        request,
        "Run it again once a worker is running (the same cut twice is one rewind).",
    )
    entry = next((e for e in reversed(snapshot.audit) if e.event == "rewound"), None)
    previous = str(entry.detail.get("run_id", "")) if entry else description.run_id or ""
    return Rewound(session_id=session_id, to=to, previous_run_id=previous)


async def _owned(
    conversations: Conversations, session_id: str, user_id: str
) -> WorkflowExecutionDescription:
    """The conversation's description, once its owner is ``user_id`` (read from the
    search attribute its start set, as ``force_end`` does: a reviewer may read and decide,
    never fork or rewind)."""
    try:
        description = await conversations.handle(session_id).describe()
    except RPCError as err:
        raise await refusal_of(err, session_id, conversations.handle(session_id)) from err
    if description.typed_search_attributes.get(PARLEY_USER) != user_id:
        raise ConversationRefused(NOT_OWNER_MESSAGE, ErrorType.NOT_OWNER)
    return description


async def _exists(conversations: Conversations, session_id: str) -> bool:
    try:
        await conversations.handle(session_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise await refusal_of(err, session_id, conversations.handle(session_id)) from err
    return True


def _taken(session_id: str) -> ConversationRefused:
    return ConversationRefused(
        f"session {session_id} already exists (or existed): a fork starts a new "
        "conversation; choose a new session id",
        ErrorType.INVALID_SESSION,
    )


async def _read(
    conversations: Conversations, session_id: str, user_id: str
) -> tuple[ConversationSnapshot, list[AnyMessage]]:
    """The conversation's state (its first kept message's offset, its chain) and every
    message it has: the stored chain (when the workflow no longer keeps them all), then
    the pages of the messages not yet stored. Messages retention deleted are refused,
    saying when (``parley.client.stored``)."""
    head = await conversations.state(
        session_id,
        user_id,
        StateQuery(user_id=user_id, transcript_offset=0, transcript_limit=1, audit_limit=0),
    )
    messages: list[AnyMessage] = []
    if head.transcript_offset > 0 and head.model_context is not None:
        stored = await stored_messages(
            conversations.temporal,
            session_id,
            head.model_context,
            head.transcript_offset,
            "a fork or a rewind copies every message up to its cut: it can no longer be "
            "forked or rewound",
        )
        messages = stored[: head.transcript_total]
    while len(messages) < head.transcript_total:
        page = await conversations.state(
            session_id,
            user_id,
            StateQuery(
                user_id=user_id,
                transcript_offset=len(messages),
                transcript_limit=1_000,
                audit_limit=0,
            ),
        )
        if page.transcript_offset != len(messages) or not page.transcript:
            raise ConversationRefused(
                f"conversation {session_id} changed while it was read; try again",
                ErrorType.TURN_IN_PROGRESS,
            )
        messages.extend(page.transcript[: head.transcript_total - len(messages)])
    return head, messages


async def _stored_cut(
    conversations: Conversations,
    head: ConversationSnapshot,
    messages: list[AnyMessage],
    at: int,
    workflow_id: str,
) -> tuple[ContextRef, list[AnyMessage]]:
    """Check the cut, store its messages as one segment (under ``workflow_id``, the
    conversation that reads it, for retention) and return its reference, with the
    compaction of the model's view when that summarised kept messages only, and the
    last messages the workflow will keep in its state."""
    if problem := cut_refusal(messages, 0, at, len(messages)):
        raise ConversationRefused(problem, ErrorType.INVALID_MESSAGE)
    kept = messages[:at]
    store = TranscriptStore(driver_of(conversations.temporal.data_converter))
    context = await store.append(
        None, kept, workflow_id=workflow_id, namespace=conversations.temporal.namespace
    )
    compaction = head.model_context.compaction if head.model_context else None
    if compaction is not None and compaction.covers <= at:
        context = context.model_copy(update={"compaction": compaction})
    tail: list[AnyMessage] = []
    chars = 0
    for message in reversed(kept):
        size = message_chars(message)
        if len(tail) >= KEPT_TRANSCRIPT_MESSAGES or (tail and chars + size > KEPT_TRANSCRIPT_CHARS):
            break
        tail.append(message)
        chars += size
    return context, tail[::-1]
