"""``GET /v1/conversations/{id}/grants``: the conversation's remembered decisions (grants)
in force, as ``parley grants --json`` lists them; ``DELETE …/grants/{grant_id}`` revokes
one (the ``revoke_grant`` update, audited ``grant_revoked``): the next call of its shape
waits for a decision. The owner and reviewers may (``parley.client.grants``). Client
side (the gateway).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel

from parley.client.grants import described, list_grants, revoke_grant
from parley.gateway.deps import Gateway, current_groups, current_user, gateway, guarded, session
from parley.gateway.schemas import ERROR_RESPONSES

router = APIRouter(responses=ERROR_RESPONSES)


class GivenFor(BaseModel):
    """What a grant was given for (None: remembered before grants recorded it)."""

    spec_hash: str | None = None
    policy_version: str | None = None
    server: str | None = None


class GrantView(BaseModel):
    """One grant: its id (the call it was given on), the tool and call shape, approve or
    reject, who gave it and when, when it ends (None: with the conversation)."""

    id: str
    tool: str
    shape: str
    policy: str
    decided_by: str
    granted_at: str | None = None
    expires_at: str | None = None
    expired: bool = False
    given_for: GivenFor


class GrantsView(BaseModel):
    grants: list[GrantView]


class RevokedView(BaseModel):
    revoked: GrantView


GRANT_ID = Path(min_length=1, max_length=256, description="The grant's id (its call's).")


@router.get("/v1/conversations/{session_id}/grants", tags=["conversations"])
async def get_grants(
    session_id: str = Depends(session),
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> GrantsView:
    """The conversation's remembered decisions in force, oldest first."""
    found = await guarded(session_id, list_grants(gw.conversations, session_id, user_id, groups))
    now = datetime.now(UTC)
    return GrantsView(grants=[GrantView.model_validate(described(g, now)) for g in found])


@router.delete("/v1/conversations/{session_id}/grants/{grant_id}", tags=["conversations"])
async def delete_grant(
    session_id: str = Depends(session),
    grant_id: str = GRANT_ID,
    user_id: str = Depends(current_user),
    groups: tuple[str, ...] = Depends(current_groups),
    gw: Gateway = Depends(gateway),
) -> RevokedView:
    """Revoke a remembered decision: the next call of its shape asks again. Audited."""
    grant = await guarded(
        session_id, revoke_grant(gw.conversations, session_id, user_id, grant_id, groups)
    )
    return RevokedView(revoked=GrantView.model_validate(described(grant, datetime.now(UTC))))
