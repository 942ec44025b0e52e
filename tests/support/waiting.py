"""Bounded waiting for tests: ``eventually`` polls a check until it holds, instead of
sleeping for a guessed time. Client side (runs in the test)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

POLL_SECONDS = 0.1


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    seconds: float = 30.0,
    what: str = "the condition",
    *,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """``check()``'s first truthy value (``check`` may be sync or async), polled every
    0.1 s for at most ``seconds``; an exception in ``ignoring`` counts as not yet (a
    server still starting refuses connections). Fails with ``what`` in the message."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        await asyncio.sleep(POLL_SECONDS)
