"""Running the gateway: uvicorn on the caller's event loop, so the app shares the
caller's Temporal client (``parley gateway``, ``parley dev``, tests). Client side.

uvicorn keeps no access log (a request line would carry an approval link's token in
its path) and logs through the process's own handlers (``parley.logs``: redacted), not
handlers of its own; the tokens the gateway takes and its Settings' secrets are
remembered for redaction (``parley.redaction``) before it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn

from parley.client import Conversations
from parley.gateway.access import TokenTable
from parley.gateway.app import create_app
from parley.redaction import remember_config, remember_values


@contextlib.asynccontextmanager
async def serving(
    conversations: Conversations, tokens: TokenTable, host: str, port: int
) -> AsyncIterator[str]:
    """Serve the gateway on ``host:port`` (port 0: a free one) while the block runs;
    yields its base URL. Refuses at once (``OSError``) if the port is taken."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    bound_host, bound_port = listener.getsockname()[:2]
    remember_values(tokens.secrets())
    remember_config(conversations.settings)
    app = create_app(conversations, tokens)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", access_log=False, log_config=None
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise OSError(f"the gateway on {bound_host}:{bound_port} did not start")
            await asyncio.sleep(0.02)
        yield f"http://{bound_host}:{bound_port}"
    finally:
        server.should_exit = True
        # Open event streams would hold a graceful exit for ever: give them a moment.
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), timeout=2)
        if not task.done():
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await app.state.feeds.aclose()
        listener.close()


async def run_gateway(
    conversations: Conversations, tokens: TokenTable, host: str, port: int
) -> None:
    """Serve until cancelled (``parley gateway``)."""
    async with serving(conversations, tokens, host, port):
        await asyncio.Event().wait()
