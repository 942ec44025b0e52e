"""The fork and rewind routes: ``POST /v1/conversations/{id}/fork`` and ``.../rewind``.
Client side (``parley.client``'s ``fork`` and ``rewind``, through the gateway's
``Conversations``).

The user is the token's, and only the conversation's owner may: anyone else's request
answers 404, exactly as for a conversation that does not exist. A cut that would leave
the model a tool call without its answer is 422 with the nearest cuts that do not; a
fork into a session id already used is 422; a rewind while a turn runs, while decisions
are owed or once the conversation has ended is 409; a fork of a conversation whose
older messages retention deleted is 410, saying when (``parley.client.stored``).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from parley.client import Forked, Rewound, fork, rewind
from parley.gateway.deps import Gateway, current_user, gateway, guarded, session
from parley.gateway.schemas import ERROR_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)


class ForkBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    at: int = Field(
        description="How many of the conversation's first messages the new one starts with "
        "(1 is the first message only). Refused (422) when the cut would leave a tool call "
        "without its answer."
    )
    as_session: str = Field(
        alias="as", description="The new conversation's session id: one never used."
    )


class ForkView(BaseModel):
    session_id: str = Field(description="The new conversation.")
    forked_from: str = Field(description="The conversation it was cut from.")
    at: int = Field(description="How many of its first messages it starts with.")
    from_run_id: str = Field(description="The workflow run they were read from.")
    temporal_ui_url: str | None = None


class RewindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: int = Field(
        description="How many of its first messages the conversation keeps. Refused (422) "
        "when the cut would leave a tool call without its answer."
    )


class RewindView(BaseModel):
    session_id: str
    to: int = Field(description="How many messages the conversation now has.")
    previous_run_id: str = Field(
        description="The run that keeps the whole history from before the rewind "
        "(`temporal workflow show --run-id`)."
    )
    temporal_ui_url: str | None = None


@router.post(
    "/v1/conversations/{session_id}/fork",
    tags=["conversations"],
    response_model=ForkView,
    status_code=201,
)
async def fork_conversation(
    body: ForkBody,
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    gw: Gateway = Depends(gateway),
) -> ForkView:
    """Start a new conversation with this one's first ``at`` messages, its reviewers and
    nothing pending; nothing runs again. Its audit log says where it came from."""
    forked: Forked = await guarded(
        session_id, fork(gw.conversations, session_id, user_id, body.at, body.as_session)
    )
    return ForkView(**forked.model_dump(), temporal_ui_url=gw.workflow_link(forked.session_id))


@router.post(
    "/v1/conversations/{session_id}/rewind", tags=["conversations"], response_model=RewindView
)
async def rewind_conversation(
    body: RewindBody,
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    gw: Gateway = Depends(gateway),
) -> RewindView:
    """Keep this conversation's first ``to`` messages and go on from there, in a new run
    of its workflow; the run before keeps the whole history."""
    rewound: Rewound = await guarded(
        session_id, rewind(gw.conversations, session_id, user_id, body.to)
    )
    return RewindView(**rewound.model_dump(), temporal_ui_url=gw.workflow_link(session_id))
