"""``GET /auth/config``: how the page signs in, with no token. Client side (the gateway).

With an OpenID Connect issuer and a client id configured (``oidc_settings``), the page
signs in with the provider (authorization code with PKCE, ``static/oidc.js``): this
answers what it needs, all public (issuer, client id, scopes, the authorization and
token endpoints from discovery, and which of the provider's tokens to send as the
bearer). Otherwise ``{"oidc": null}``: the page asks for a token of the tokens file.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel


class OidcPageConfig(BaseModel):
    issuer: str
    client_id: str
    scopes: str
    authorization_endpoint: str
    token_endpoint: str
    bearer: Literal["id_token", "access_token"]


class SignInConfig(BaseModel):
    oidc: OidcPageConfig | None = None


router = APIRouter(tags=["operations"])


@router.get("/auth/config", response_model=SignInConfig)
async def sign_in_config(request: Request) -> JSONResponse:
    """How the page signs in: the OpenID Connect provider's public settings, or null
    (a token of the gateway's tokens file). No token needed."""
    oidc = request.app.state.gateway.oidc
    config = oidc.page_config() if oidc is not None else None
    return JSONResponse({"oidc": config}, headers={"Cache-Control": "no-cache"})
