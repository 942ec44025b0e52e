"""The REST routes under ``/v1``: who am I, listing, state, messages, decisions, the
undo of an approved call in its undo window, the revert of a call that ran, and a
conversation's event stream. Client side (talks to Temporal through
``parley.client.Conversations``).

The user id is the token's (``deps.current_user``), never the body's. Another user's
conversation answers 404, exactly as a missing one does.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from parley.client import ConversationRefused
from parley.client.reverts import revert
from parley.contracts import ConversationStatus, Decision, StateQuery, TurnResult, UndoResult
from parley.contracts.busy import WhileBusy
from parley.contracts.errors import ErrorType
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, guarded, session
from parley.gateway.errors import ApiError
from parley.gateway.schemas import (
    ERROR_RESPONSES,
    ConversationList,
    ConversationListItem,
    ConversationView,
    Me,
    sse_reply,
)
from parley.gateway.streams import follow, respond_to_turn, sse

#: A message id a client picks (for retries): short, and usable in an update id.
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"
MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)

router = APIRouter(responses=ERROR_RESPONSES)


class MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What the user says.")
    message_id: str | None = Field(
        default=None,
        pattern=MESSAGE_ID_PATTERN,
        description="Your id for this message: sending it again returns the first "
        "result and applies nothing twice.",
    )
    reviewers: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Users besides you who may read the conversation and decide on its "
        "calls; only when this message starts the conversation.",
    )
    while_busy: WhileBusy | None = Field(
        default=None,
        description="If a turn is running: reject (409 TurnInProgress), enqueue (the "
        "message becomes the next turn, in order; the answer is that turn's) or interrupt "
        "(the model call in flight is cancelled, never a tool, and the turn goes on with "
        "this message too; the answer is that turn's). Default: the conversation's.",
    )
    added_instructions: str | None = Field(
        default=None,
        max_length=64 * 1024,
        description="Added to the agent's instructions for the whole conversation (never "
        "in place of them); only by the message that starts it, and only where the worker "
        "allows it (PARLEY_ALLOW_ADDED_INSTRUCTIONS), else the turn fails saying so.",
    )


class StrictDecision(Decision):
    """A decision as the gateway reads it: an unknown key is refused, never ignored."""

    model_config = ConfigDict(extra="forbid")


class DecisionsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[StrictDecision] = Field(
        min_length=1, description="One decision for every pending call."
    )


@router.get("/v1/me", tags=["conversations"], response_model=Me)
async def me(user_id: str = Depends(current_user), gw: Gateway = Depends(gateway)) -> Me:
    return Me(
        user_id=user_id,
        namespace=gw.settings.namespace,
        temporal_ui_url=gw.settings.temporal_ui_url,
    )


@router.get("/v1/conversations", tags=["conversations"], response_model=ConversationList)
async def list_conversations(
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    status: ConversationStatus | None = Query(
        default=None, description="Only conversations with this status."
    ),
    reviewing: bool = Query(
        default=False,
        description="Conversations of others that name you a reviewer (or a group of "
        "yours, `group:<name>`, with an OpenID Connect token).",
    ),
) -> ConversationList:
    """The caller's conversations from Temporal's visibility (search attributes),
    awaiting approval first."""
    try:
        found = await gw.conversations.list(user_id, reviewing=reviewing, groups=groups)
    except ConversationRefused as refusal:
        raise ApiError(502, refusal.error_type or ErrorType.REFUSED, refusal.message) from None
    return ConversationList(
        conversations=[
            ConversationListItem(**dict(c), temporal_ui_url=gw.workflow_link(c.session_id))
            for c in found
            if status is None or c.status == status
        ]
    )


@router.get(
    "/v1/conversations/{session_id}", tags=["conversations"], response_model=ConversationView
)
async def get_conversation(
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    transcript_limit: int = Query(default=200, ge=0, le=1_000),
    audit_limit: int = Query(default=200, ge=0, le=1_000),
) -> ConversationView:
    """Status, pending calls, the latest messages and the audit log (who decided
    what, when, with which args). A member of a reviewer group reads it as that
    reviewer (``awaiting``: what they may do)."""
    query = StateQuery(
        user_id=user_id,
        transcript_limit=transcript_limit,
        audit_limit=audit_limit,
        groups=sorted(set(groups)),
    )
    snapshot = await guarded(session_id, gw.conversations.state(session_id, user_id, query))
    return ConversationView(**dict(snapshot), temporal_ui_url=gw.workflow_link(session_id))


@router.post(
    "/v1/conversations/{session_id}/messages",
    tags=["conversations"],
    response_model=TurnResult,
    responses=sse_reply("With `Accept: text/event-stream`, the turn's events"),
)
async def post_message(
    body: MessageBody,
    request: Request,
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    gw: Gateway = Depends(gateway),
) -> Any:
    """Send a message (starting the conversation if it is new). Answers the turn's
    result, or with ``Accept: text/event-stream`` the turn's AG-UI events."""
    message_id = body.message_id or uuid.uuid4().hex[:16]

    def call() -> Awaitable[TurnResult]:
        return gw.conversations.send(
            session_id,
            user_id,
            body.text,
            message_id=message_id,
            reviewers=body.reviewers,
            while_busy=body.while_busy,
            added_instructions=body.added_instructions,
        )

    return await respond_to_turn(gw, request, session_id, user_id, call)


@router.post(
    "/v1/conversations/{session_id}/decisions",
    tags=["conversations"],
    response_model=TurnResult,
    responses=sse_reply("With `Accept: text/event-stream`, the turn's events"),
)
async def post_decisions(
    body: DecisionsBody,
    request: Request,
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> Any:
    """Decide every pending call at once (approve, edit, reject, respond). The
    decider recorded in the audit log is the token's user; an OpenID Connect token's
    groups count them in as a reviewer ``group:<name>``."""

    decisions = [Decision.model_validate(d.model_dump()) for d in body.decisions]

    def call() -> Awaitable[TurnResult]:
        return gw.conversations.decide(session_id, user_id, decisions, groups=groups)

    return await respond_to_turn(gw, request, session_id, user_id, call, groups)


@router.post(
    "/v1/conversations/{session_id}/calls/{call_id}/undo",
    tags=["conversations"],
    response_model=UndoResult,
)
async def undo_call(
    session_id: str = Depends(session),
    call_id: str = Path(min_length=1, max_length=128, description="The approved call's id."),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> UndoResult:
    """Take back an approved call still in its undo window (its rule's
    ``undo_seconds``; the conversation's ``scheduled``): it never runs, and the model is
    told who undid it. Only an approver (any of a quorum's) or the conversation's owner
    may; a call not in a window (it ran, was undone, or had none) is 422, an ended
    conversation 409. The decision's own request answers once its turn is over, with the
    call "undone"."""
    return await guarded(
        session_id, gw.conversations.undo(session_id, user_id, [call_id], groups=groups)
    )


@router.post(
    "/v1/conversations/{session_id}/calls/{call_id}/revert",
    tags=["conversations"],
    response_model=TurnResult,
)
async def revert_call(
    session_id: str = Depends(session),
    call_id: str = Path(min_length=1, max_length=128, description="The id of a call that ran."),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> TurnResult:
    """Take back a call that ran by its tool's declared inverse: Parley proposes it (call
    id ``revert-<call_id>``) and the gate sorts it like any call, so the turn usually
    rests ``awaiting_approval`` of it. The owner or a reviewer may. A call whose tool
    declares no inverse, that did not run successfully, or that was reverted already is
    422; calls still waiting for a decision or a turn in flight 409, an ended conversation
    409."""
    return await guarded(session_id, revert(gw.conversations, session_id, user_id, call_id, groups))


@router.get(
    "/v1/conversations/{session_id}/events",
    tags=["conversations"],
    response_class=StreamingResponse,
    responses=sse_reply("The conversation's events from the offset on, as they come"),
)
async def follow_events(
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    after: int = Query(default=-1, ge=-1, description="Send events after this offset."),
    last_event_id: str | None = Header(default=None),
) -> StreamingResponse:
    """The conversation's AG-UI events as Server-Sent Events, from ``after`` (or the
    ``Last-Event-ID`` a reconnecting client sends), following new ones. An offset
    beyond the latest event is read as the latest: the stream sends new events only."""
    if last_event_id is not None:
        try:
            after = max(int(last_event_id), -1)
        except ValueError:
            raise ApiError(
                422, ErrorType.INVALID_REQUEST, "Last-Event-ID must be an event offset (an integer)"
            ) from None
    # Refused now (404, 422), not after the stream has begun.
    page = await guarded(
        session_id, gw.conversations.events(session_id, user_id, limit=1, groups=groups)
    )
    return sse(follow(gw, session_id, user_id, after, page.latest, groups))
