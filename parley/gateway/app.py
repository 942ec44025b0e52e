"""The gateway's FastAPI application: its parts wired together. Client side (talks to
Temporal through ``parley.client.Conversations``).

- ``rest``: the ``/v1`` routes (state, messages, decisions, a conversation's events);
- ``agui``: ``POST /agui``, the AG-UI protocol's runs and resumes;
- ``streams``: turns and conversations as AG-UI Server-Sent Events;
- ``inbox``: every call waiting on the caller, and identical calls decided at once;
- ``forks``: fork and rewind a conversation (``/v1/conversations/{id}/fork|rewind``);
- ``links``: signed one-time approval links, opened without a bearer token;
- ``audit``: the audit log's chained export;
- ``grants``: a conversation's remembered decisions, listed and revoked;
- ``errors``: one JSON error shape, ``{"error": {"type", "message"}}``;
- ``schemas``: the OpenAPI document's error, response and ``/agui`` models;
- ``guard``: authentication and a body-size limit, before any body is read;
- ``link_pages``: no referrer and no caching for anything under ``/links/``;
- ``deps``: the caller's user (from the bearer token), checked session ids;
- ``health``: ``/healthz`` (alive) and ``/readyz`` (Temporal answers), with no token;
- ``oidc``, ``sign_in``: OpenID Connect bearer tokens, and the page's sign-in settings;
- and here: the approval page at ``/``.

Every ``/v1`` and ``/agui`` request carries ``Authorization: Bearer <token>``; the
user id is the token's (``access``), never the body's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from parley.client import Conversations
from parley.gateway import (
    agui,
    audit,
    forks,
    grants,
    health,
    inbox,
    links,
    rest,
    results,
    sign_in,
)
from parley.gateway.access import TokenTable
from parley.gateway.deps import Gateway
from parley.gateway.errors import install_error_handlers
from parley.gateway.feeds import Feeds
from parley.gateway.guard import RefuseBeforeReading, max_body_bytes
from parley.gateway.link_pages import LinkPageHeaders
from parley.gateway.oidc import OidcVerifier
from parley.gateway.schemas import document
from parley.gateway.streams import Drain
from parley.observability import tracing


def create_app(
    conversations: Conversations,
    tokens: TokenTable,
    *,
    drain: Drain | None = None,
    oidc: OidcVerifier | None = None,
) -> FastAPI:
    """The gateway's app; ``drain`` (the server's) ends its event streams as it stops;
    ``oidc`` (started) verifies OpenID Connect bearer tokens beside ``tokens``."""
    feeds = Feeds(conversations)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await feeds.aclose()

    app = FastAPI(
        title="Parley gateway",
        version="1",
        description="Parley conversations over HTTP: turns, decisions, AG-UI event "
        "streams, and an approval page at /.",
        lifespan=lifespan,
        # Operation ids are the routes' names (post_message, get_conversation...), which
        # a generated client names its functions by.
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.feeds = feeds
    app.state.drain = drain or Drain()
    app.state.gateway = Gateway(conversations=conversations, tokens=tokens, feeds=feeds, oidc=oidc)
    install_error_handlers(app)
    # Outermost but for Starlette's own error handling: before routing, before a body.
    app.add_middleware(
        RefuseBeforeReading,
        tokens=tokens,
        max_body_bytes=max_body_bytes(conversations.settings),
        oidc=oidc,
    )
    app.add_middleware(LinkPageHeaders)  # outside the guard: its refusals carry them too

    static = resources.files("parley.gateway") / "static"
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(str(static / "index.html"), headers={"Cache-Control": "no-cache"})

    @app.get("/favicon.ico", include_in_schema=False)  # browsers ask for it, pages or not
    async def favicon() -> FileResponse:
        return FileResponse(str(static / "favicon.svg"), media_type="image/svg+xml")

    app.include_router(health.router)
    app.include_router(sign_in.router)
    app.include_router(rest.router)
    app.include_router(inbox.router)
    app.include_router(forks.router)
    app.include_router(agui.router)
    app.include_router(links.router)
    app.include_router(audit.router)
    app.include_router(results.router)
    app.include_router(grants.router)
    document(app)
    tracing.instrument_app(
        app
    )  # with traces on: each request a span (parley.observability.tracing)
    return app
