"""What every route needs: the gateway's shared parts, the caller's user id, a checked
session id, and refusals turned into HTTP errors. Client side (the gateway).

The routers (``rest``, ``agui``) are module-level; they reach the one :class:`Gateway`
of their app through ``request.app.state.gateway``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from parley.client import ConversationRefused, Conversations
from parley.config.settings import Settings
from parley.contracts import workflow_id_for
from parley.contracts.errors import ErrorType
from parley.gateway.access import TokenTable
from parley.gateway.errors import ApiError, refused
from parley.gateway.feeds import Feeds
from parley.gateway.guard import GROUPS_STATE_KEY, USER_STATE_KEY
from parley.gateway.oidc import OidcVerifier

bearer = HTTPBearer(auto_error=False)


@dataclass
class Gateway:
    """The parts every request of one app shares."""

    conversations: Conversations
    tokens: TokenTable
    feeds: Feeds
    #: The OpenID Connect issuer's verifier, when one is configured.
    oidc: OidcVerifier | None = None

    @property
    def settings(self) -> Settings:
        return self.conversations.settings

    def workflow_link(self, session_id: str) -> str:
        settings = self.settings
        return (
            f"{settings.temporal_ui_url.rstrip('/')}/namespaces/{settings.namespace}"
            f"/workflows/{workflow_id_for(session_id)}"
        )


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def current_user(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
) -> str:
    """The token's user, as ``guard`` found it from the headers before any body was
    read. (``credentials`` puts the bearer scheme into the OpenAPI document.)"""
    user_id = getattr(request.state, USER_STATE_KEY, None)
    if user_id is None:  # a route outside ``guard.needs_token``: check here
        token = credentials.credentials if credentials is not None else ""
        user_id = gateway(request).tokens.user_for(token) if token else None
    if user_id is None:
        raise ApiError(
            401, ErrorType.UNAUTHENTICATED, "send your token as 'Authorization: Bearer <token>'"
        )
    return user_id


def current_groups(request: Request) -> tuple[str, ...]:
    """The caller's groups, from a verified OpenID Connect token (none for a token of
    the tokens file): a reviewer ``group:<name>`` counts its members in."""
    return tuple(getattr(request.state, GROUPS_STATE_KEY, ()) or ())


def session(session_id: str) -> str:
    try:
        workflow_id_for(session_id)
    except ValueError as err:
        raise ApiError(422, ErrorType.INVALID_SESSION, str(err)) from None
    return session_id


async def guarded(session_id: str, call: Awaitable[Any]) -> Any:
    try:
        return await call
    except ConversationRefused as refusal:
        raise refused(refusal, session_id) from None
