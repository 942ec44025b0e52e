"""What every answer under ``/links/`` carries: ``Referrer-Policy: no-referrer`` and
``Cache-Control: no-store``. Client side (the gateway): a pure ASGI middleware, in
front of the routes and of the guard, so the link's page, its decision, every refusal
(403 forged, 410 expired, 409 used, 413, 422) and an error the server makes all carry
them.

An approval link's token is in its path, and the token is the link's authority: no
page reached from it may be told where the reader came from (``Referer``), and no
cache (a browser's, a proxy's) may keep a page or its address.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The headers of every answer under ``/links/``.
LINK_PAGE_HEADERS = {"referrer-policy": "no-referrer", "cache-control": "no-store"}
_ENCODED = [(name.encode(), value.encode()) for name, value in LINK_PAGE_HEADERS.items()]


def is_link_path(path: str) -> bool:
    return path == "/links" or path.startswith("/links/")


class LinkPageHeaders:
    """Sets ``LINK_PAGE_HEADERS`` on every answer to a ``/links`` path (replacing a
    route's own values of the same headers)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_link_path(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.decode("latin-1").lower() not in LINK_PAGE_HEADERS
                ]
                message = {**message, "headers": [*kept, *_ENCODED]}
            await send(message)

        await self.app(scope, receive, with_headers)
