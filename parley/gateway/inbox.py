"""The inbox routes: ``GET /v1/inbox``, every call waiting on the caller across
conversations (no worker needed), and ``POST /v1/inbox/decide``, one call and every
identical one answered, each in its own conversation. Client side (talks to Temporal
through ``parley.client.inbox``).

The user is the token's, its groups an OpenID Connect token's, exactly as for
``POST /v1/conversations/{id}/decisions``: every conversation's gate checks the decider
again. A call that does not wait on the caller answers 404, as another user's
conversation does.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from parley.client import ConversationRefused
from parley.client.inbox import BatchAction, BatchDecision, Inbox, decide_like, read_inbox
from parley.contracts.errors import ErrorType
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, session
from parley.gateway.errors import HTTP_STATUS, ApiError
from parley.gateway.schemas import ERROR_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)


class InboxDecideBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(description="The conversation of the call named.")
    tool_call_id: str = Field(min_length=1, max_length=128, description="The call named.")
    action: BatchAction = Field(description="approve or reject, the same for every one.")
    message: str | None = Field(
        default=None, max_length=4_000, description="With reject: why (the model is told)."
    )


def _error(refusal: ConversationRefused) -> ApiError:
    error_type = refusal.error_type or ErrorType.REFUSED
    return ApiError(HTTP_STATUS.get(error_type, 502), error_type, refusal.message)


@router.get("/v1/inbox", tags=["inbox"], response_model=Inbox)
async def get_inbox(
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
    tool: str | None = Query(default=None, max_length=128, description="Only this tool's calls."),
    rule: str | None = Query(
        default=None, max_length=64, description="Only calls that wait because of this rule."
    ),
    session_id: str | None = Query(
        default=None, alias="session", description="Only this conversation's calls."
    ),
) -> Inbox:
    """Every call waiting on you (as owner or reviewer, or by a reviewer group of
    yours), across conversations: the oldest first, then the soonest to expire. Read
    from Temporal's visibility and histories: no worker needed; a conversation whose
    calls need a worker to read, while none runs, is in ``unread`` with why."""
    if session_id is not None:
        session(session_id)
    try:
        return await read_inbox(
            gw.conversations, user_id, groups=groups, tool=tool, rule=rule, session=session_id
        )
    except ConversationRefused as refusal:
        raise _error(refusal) from None


@router.post("/v1/inbox/decide", tags=["inbox"], response_model=BatchDecision)
async def decide_identical(
    body: InboxDecideBody,
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> BatchDecision:
    """Answer the call named and every identical call waiting on you (the same tool,
    the same canonical arguments): one decision per conversation, each call its own
    audit entry and result; a call whose arguments differ is never included.
    ``applied`` says per conversation what was applied (``decided`` only from its
    result)."""
    session(body.session_id)
    try:
        return await decide_like(
            gw.conversations,
            user_id,
            body.session_id,
            body.tool_call_id,
            body.action,
            message=body.message,
            groups=groups,
        )
    except ConversationRefused as refusal:
        raise _error(refusal) from None
