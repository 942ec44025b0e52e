"""Streams a model reply's text to its conversation while the model writes it.
Activity side.

``call_model`` reads the provider's stream (langchain-core ``astream``) and hands the
reply's text so far to a :class:`ReplyStreamer`, which sends what is new to the
conversation's own workflow run by the ``stream_delta`` signal, in batches
(``parley.contracts.limits``: the first soon after the first text, then at most every
100 ms, at most 200 per call). The workflow turns each batch into a
``TEXT_MESSAGE_CONTENT`` event (``parley.workflows.streaming``). Text that comes after
the last batch goes with the reply itself, so streaming never changes the message: a
lost or refused signal costs only liveness, and a reply that arrives whole is never
streamed at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from parley.contracts import StreamDelta
from parley.contracts.limits import (
    STREAM_BATCH_SECONDS,
    STREAM_BATCHES_PER_CALL,
    STREAM_FIRST_BATCH_SECONDS,
)

log = logging.getLogger(__name__)

Send = Callable[[StreamDelta], Awaitable[None]]


class ReplyStreamer:
    """Sends one attempt's reply text, as it grows, in numbered batches. Use as an
    async context manager around reading the stream; leaving it stops the sending
    (a batch in flight completes first, so no batch can follow the reply)."""

    def __init__(
        self,
        send: Send,
        message_id: str,
        *,
        first_batch: float = STREAM_FIRST_BATCH_SECONDS,
        batch: float = STREAM_BATCH_SECONDS,
        max_batches: int = STREAM_BATCHES_PER_CALL,
    ) -> None:
        self._send = send
        self._message_id = message_id
        self._delays = (first_batch, batch)
        self._max_batches = max_batches
        self._text = ""
        self._sent = 0
        self._batches = 0
        self._grew = asyncio.Event()
        self._done = False
        self._task: asyncio.Task[None] | None = None

    @property
    def batches(self) -> int:
        return self._batches

    def update(self, text: str) -> None:
        """The reply's whole text so far (it only ever grows)."""
        if len(text) > len(self._text):
            self._text = text
            self._grew.set()

    async def __aenter__(self) -> ReplyStreamer:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done = True
        self._grew.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        clock = asyncio.get_running_loop().time
        last_sent = clock()
        while self._batches < self._max_batches:
            await self._grew.wait()
            if self._done:
                return
            # A batch at most every interval, counted from the previous one's start (not
            # its end), so the signal's round trip does not slow the stream down.
            if self._batches == 0:
                await asyncio.sleep(self._delays[0])
            else:
                await asyncio.sleep(max(0.0, last_sent + self._delays[1] - clock()))
            self._grew.clear()
            if self._done:
                return  # the rest goes with the reply
            new = self._text[self._sent :]
            if not new:
                continue
            delta = StreamDelta(message_id=self._message_id, sequence=self._batches + 1, text=new)
            last_sent = clock()
            try:
                await self._send(delta)
            except Exception as err:  # the reply still carries all its text
                log.warning("streaming %s stopped: %s", self._message_id, err)
                return
            self._batches += 1
            self._sent += len(new)
