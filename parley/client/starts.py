"""How a conversation's workflow is started, by a first message (``Conversations.send``)
or by a fork (``parley.client.forks``): its input, from this client's settings, and the
start options both use, and ``settle`` for an update-with-start's start operation. Client
side (never imported by workflows).

A conversation is started with ``REJECT_DUPLICATE``: an ended conversation stays ended,
and a new message or a fork never silently starts an empty one under the same id. Its
search attributes are set at the start, not upserted by the workflow: a start event
costs fewer bytes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WithStartWorkflowOperation
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)

from parley.config.settings import Settings
from parley.contracts import PARLEY_REVIEWERS, PARLEY_STATUS, PARLEY_USER, ConversationStart


def conversation_start(
    settings: Settings, session_id: str, user_id: str, reviewers: list[str], **fields: Any
) -> ConversationStart:
    """A new conversation's input: its owner, its reviewers and this client's settings
    (``while_busy`` from ``Settings.while_busy``; None is ``reject`` and costs no bytes),
    plus ``fields`` (a fork's origin)."""
    return ConversationStart(
        session_id=session_id,
        user_id=user_id,
        pending_expiry_seconds=settings.pending_expiry_seconds,
        max_model_calls_per_turn=settings.max_model_calls_per_turn,
        continue_as_new_after_events=settings.continue_as_new_after_events,
        max_message_bytes=settings.max_message_bytes,
        reviewers=reviewers,
        while_busy=settings.while_busy if settings.while_busy != "reject" else None,
        **fields,
    )


def start_options(
    settings: Settings,
    workflow_id: str,
    start: ConversationStart,
    *,
    conflict: WorkflowIDConflictPolicy,
    summary: str,
) -> dict[str, Any]:
    """The options of ``start_workflow`` or ``WithStartWorkflowOperation`` for ``start``:
    an id already running is ``conflict`` (a message joins it; a fork fails)."""
    return {
        "id": workflow_id,
        "task_queue": settings.task_queue,
        "id_conflict_policy": conflict,
        "id_reuse_policy": WorkflowIDReusePolicy.REJECT_DUPLICATE,
        "search_attributes": TypedSearchAttributes(
            [
                SearchAttributePair(PARLEY_USER, start.user_id),
                SearchAttributePair(PARLEY_STATUS, "idle"),
                *(
                    [SearchAttributePair(PARLEY_REVIEWERS, start.reviewers)]
                    if start.reviewers
                    else []
                ),
            ]
        ),
        "static_summary": summary,
    }


async def settle(start: WithStartWorkflowOperation[object, object]) -> None:
    """Read the outcome of an update-with-start's start operation: the SDK keeps it in a
    future, and an unread failure (a refusal, or the ``CancelledError`` it is given when
    the liveness watch cancels the call) is logged later as "Future exception was never
    retrieved". Bounded, in case the SDK never settled it."""
    try:
        await asyncio.wait_for(start.workflow_handle(), timeout=1)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # this call itself is being cancelled: let it be
    except Exception:  # the call's own outcome says what happened
        pass
