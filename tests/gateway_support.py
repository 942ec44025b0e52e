"""Running the real gateway for a test: uvicorn on 127.0.0.1, a free port, the test's
own worker and Temporal client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import httpx

from parley.client import Conversations
from parley.gateway.access import TokenTable
from parley.gateway.server import serving

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789ab"
TOKENS = {ALICE_TOKEN: "alice", BOB_TOKEN: "bob"}


@contextlib.asynccontextmanager
async def serve_gateway(
    conversations: Conversations, tokens: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """The gateway app on ``http://127.0.0.1:<free port>``; ``tokens`` maps token to
    user id (by default alice's and bob's)."""
    async with serving(conversations, TokenTable(tokens or TOKENS), "127.0.0.1", 0) as url:
        yield url


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class SseEvent:
    def __init__(self, event_id: str | None, data: dict) -> None:
        self.id = event_id
        self.data = data
        self.type = data.get("type")

    def __repr__(self) -> str:
        return f"SseEvent({self.id}, {self.type})"


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Parse a ``text/event-stream`` body: one event per blank-line-ended block."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SseEvent(event_id, json.loads("\n".join(data)))
            event_id, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def collect_until(
    response: httpx.Response, done: Callable[[list[SseEvent]], bool], seconds: float = 30
) -> list[SseEvent]:
    """Events of a stream until ``done(events)`` holds (or the stream ends)."""
    seen: list[SseEvent] = []

    async def read() -> None:
        async for event in sse_events(response):
            seen.append(event)
            if done(seen):
                return

    await asyncio.wait_for(read(), timeout=seconds)
    return seen
