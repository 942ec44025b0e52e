"""A conversation's grants (its remembered decisions, ``parley.contracts.grants``): read
from the ``state`` query, revoked by the ``revoke_grant`` update, and described as the
surfaces show them (``parley grants``, ``GET /v1/conversations/{id}/grants``). Client
side (never imported by workflows)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from parley.client.conversations import Conversations
from parley.client.errors import checked_user
from parley.contracts import StateQuery
from parley.contracts.grants import RememberedDecision, RevokeGrantInput, when
from parley.workflows.conversation import ConversationWorkflow


async def list_grants(
    conversations: Conversations, session_id: str, user_id: str, groups: Sequence[str] = ()
) -> list[RememberedDecision]:
    """The conversation's remembered decisions in force, oldest first (a member reads
    them; no transcript or audit page is read)."""
    query = StateQuery(
        user_id=checked_user(user_id), transcript_limit=0, audit_limit=0, groups=sorted(set(groups))
    )
    return (await conversations.state(session_id, user_id, query)).remembered


async def revoke_grant(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    grant_id: str,
    groups: Sequence[str] = (),
) -> RememberedDecision:
    """Forget the grant given on call ``grant_id``: the next call of its shape waits for
    a decision. Audited ``grant_revoked``; an unknown id is refused, naming the grants."""
    request = RevokeGrantInput(
        user_id=checked_user(user_id), grant_id=grant_id, groups=sorted(set(groups))
    )
    return await conversations.ending_update(  # type: ignore[type-var]
        session_id,
        ConversationWorkflow.revoke_grant,
        request,
        "Revoking a grant needs a running worker; run it again once one is running.",
    )


def described(grant: RememberedDecision, now: datetime) -> dict[str, Any]:
    """A grant as the surfaces show it: its id (the call it was given on), the tool and
    the call's shape, the policy it gives, who gave it and when, when it ends, and what it
    was given for (None where it was remembered before grants recorded it)."""
    tool = grant.tool or grant.shape.partition(" ")[0]
    ends = grant.expires_at
    return {
        "id": grant.tool_call_id,
        "tool": tool,
        "shape": grant.shape,
        "policy": "approve" if grant.policy == "auto" else "reject",
        "decided_by": grant.decided_by,
        "granted_at": grant.granted_at.isoformat() if grant.granted_at else None,
        "expires_at": ends.isoformat() if ends else None,
        "expired": ends is not None and now >= ends,
        "given_for": {
            "spec_hash": grant.spec_hash,
            "policy_version": grant.policy_version,
            "server": grant.server,
        },
    }


def grant_line(grant: RememberedDecision, now: datetime) -> str:
    """One grant as ``parley grants`` prints it."""
    shown = described(grant, now)
    ends = "for the rest of the conversation"
    if grant.expires_at is not None:
        ends = ("ended " if shown["expired"] else "until ") + when(grant.expires_at)
    given = shown["given_for"]
    parts = [
        f"tool {given['spec_hash']}" if given["spec_hash"] else None,
        f"policy {given['policy_version']}" if given["policy_version"] else None,
        f"server {given['server']}" if given["server"] else None,
    ]
    given_for = ", ".join(p for p in parts if p) or "not recorded"
    return (
        f"{shown['id']}: {shown['policy']} {grant.shape} — by {grant.decided_by} at "
        f"{when(grant.granted_at)}, {ends}; given for {given_for}"
    )
