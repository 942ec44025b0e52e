"""The gateway refuses before it reads: a pure ASGI middleware in front of every route.
Client side (the gateway).

- ``/v1`` and ``/agui`` requests need ``Authorization: Bearer <token>``: one without a
  known token answers 401 from its headers alone, its body never read. The token's
  user id is handed to the routes (``deps.current_user``) in the request's state.
  With an OpenID Connect issuer configured (``oidc``), a JWT-shaped bearer is verified
  there (its groups go to the state too; an issuer that cannot be reached when a key
  must be fetched answers 503); any other bearer is looked up in the tokens file.
- No request body is read past the limit (``PARLEY_GATEWAY_MAX_BODY_BYTES``; by
  default the message limit plus 4 MiB, room for a largest message however its JSON
  escapes it): a ``Content-Length`` over it answers 413 at once, and a body sent
  without one (chunked) is counted as it arrives and answers 413 the moment it passes
  the limit. Until a route reads it, a body waits in the server's small buffer.

Both answer in the gateway's one error shape, ``{"error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.config.settings import Settings
from parley.contracts.errors import ErrorType
from parley.gateway.access import TokenTable
from parley.gateway.oidc import IssuerUnreachable, OidcVerifier, Refused, looks_like_jwt

#: Room above the message limit for the rest of a body and for JSON's escapes.
BODY_MARGIN_BYTES = 4 * 1024 * 1024
#: The error type of a body over the limit.
REQUEST_TOO_LARGE = ErrorType.REQUEST_TOO_LARGE
#: Where the user id of a request's token goes (``request.state.user_id``).
USER_STATE_KEY = "user_id"
#: Where the groups of a verified OIDC token go (``request.state.groups``).
GROUPS_STATE_KEY = "groups"


def max_body_bytes(settings: Settings) -> int:
    return settings.gateway_max_body_bytes or settings.max_message_bytes + BODY_MARGIN_BYTES


def needs_token(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/") or path == "/agui"


class BodyTooLarge(Exception):
    """A streamed body passed the limit while a route read it."""


class RefuseBeforeReading:
    """Authentication from the headers, and a body-size limit, before any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenTable,
        max_body_bytes: int,
        oidc: OidcVerifier | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.oidc = oidc

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if needs_token(scope["path"]):
            try:
                user_id, groups, problem = await self._user(headers.get("authorization"))
            except IssuerUnreachable as down:
                message = f"the sign-in provider cannot be reached to check this token: {down}"
                await answer(send, 503, ErrorType.UNREACHABLE, message)
                return
            if user_id is None:
                await answer(send, 401, ErrorType.UNAUTHENTICATED, problem)
                return
            scope.setdefault("state", {})[USER_STATE_KEY] = user_id
            scope["state"][GROUPS_STATE_KEY] = groups
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                await answer(
                    send, 400, ErrorType.INVALID_REQUEST, "Content-Length must be a number"
                )
                return
            if int(declared) > self.max_body_bytes:
                await answer(send, 413, REQUEST_TOO_LARGE, self._too_large())
                return
        await self._counting(scope, receive, send)

    async def _user(self, authorization: str | None) -> tuple[str | None, tuple[str, ...], str]:
        """The caller's user id and groups, or None and why not."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None, (), "send your token as 'Authorization: Bearer <token>'"
        if self.oidc is not None and looks_like_jwt(token):
            try:
                identity = await self.oidc.identify(token)
            except Refused as refused:
                return None, (), str(refused)
            return identity.user_id, identity.groups, ""
        user_id = self.tokens.user_for(token)
        if user_id is None:
            return None, (), "this token is not known to the gateway"
        return user_id, (), ""

    def _too_large(self) -> str:
        return f"the request body is larger than the gateway's limit of {self.max_body_bytes} bytes"

    async def _counting(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with a ``receive`` that stops at the limit. The route's own
        answer to the refused read (a parse error, an exception) becomes the 413."""
        received = 0
        too_large = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, too_large
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    too_large = True
                    raise BodyTooLarge(self._too_large())
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await answer(send, 413, REQUEST_TOO_LARGE, self._too_large())
                return  # the route's own answer to the refused read
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLarge:
            if not started:
                await answer(send, 413, REQUEST_TOO_LARGE, self._too_large())


async def answer(send: Send, status: int, error_type: str, message: str) -> None:
    body = json.dumps({"error": {"type": error_type, "message": message}}).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
