"""Streams a model reply's text to its conversation while the model writes it.
Activity side.

``call_model`` reads the provider's stream (langchain-core ``astream``) and hands the
reply's text so far to a :class:`ReplyStreamer`, which sends what is new to the
conversation's own workflow run by the ``stream_delta`` signal, in batches
(``parley.contracts.limits``: the first soon after the first text, the next 250 ms
later, each later one twice as long after the one before up to one a second, at most
200 per call: every batch is a signal and history, so a long reply costs one a
second). A batch carries at most ``STREAM_BATCH_MAX_BYTES`` (a
longer text waits for the next ones), and a call streams at most
``STREAM_BYTES_PER_CALL`` in all: each signal is written into the run's history, so
what a call streams is bounded whatever the model writes. The workflow turns each batch
into a ``TEXT_MESSAGE_CONTENT`` event (``parley.workflows.turn.streaming``). Text that comes
after the last batch goes with the reply itself, so streaming never changes the message:
a lost or refused signal costs only liveness, and a reply that arrives whole is never
streamed at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from parley.contracts import StreamDelta
from parley.contracts.limits import (
    STREAM_BATCH_MAX_BYTES,
    STREAM_BATCH_MAX_SECONDS,
    STREAM_BATCH_SECONDS,
    STREAM_BATCHES_PER_CALL,
    STREAM_BYTES_PER_CALL,
    STREAM_FIRST_BATCH_SECONDS,
    utf8_prefix,
    utf8_size,
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
        max_batch_interval: float = STREAM_BATCH_MAX_SECONDS,
        max_batches: int = STREAM_BATCHES_PER_CALL,
        max_batch_bytes: int = STREAM_BATCH_MAX_BYTES,
        max_bytes: int = STREAM_BYTES_PER_CALL,
    ) -> None:
        self._send = send
        self._message_id = message_id
        self._first_batch = first_batch
        self._interval, self._max_interval = batch, max_batch_interval
        self._max_batches = max_batches
        self._max_batch_bytes = max_batch_bytes
        self._max_bytes = max_bytes
        self._text = ""
        self._parts: list[str] = []
        self._length = 0
        self._sent = 0
        self._sent_bytes = 0
        self._batches = 0
        self._grew = asyncio.Event()
        self._done = False
        self._task: asyncio.Task[None] | None = None

    @property
    def batches(self) -> int:
        return self._batches

    def update(self, text: str) -> None:
        """The reply's whole text so far (it only ever grows)."""
        if len(text) > self._length:
            self._parts, self._length = [text], len(text)
            self._grew.set()

    def append(self, piece: str) -> None:
        """The next piece of the reply's text (joined only when a batch goes out, so a
        reply of many pieces costs linear time)."""
        if piece:
            self._parts.append(piece)
            self._length += len(piece)
            self._grew.set()

    def _text_so_far(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

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
            # The interval is counted from the previous batch's start (not its end), so
            # the signal's round trip does not slow the stream down; it doubles after
            # each batch, up to the longest.
            if self._batches == 0:
                await asyncio.sleep(self._first_batch)
            else:
                await asyncio.sleep(max(0.0, last_sent + self._interval - clock()))
                self._interval = min(self._interval * 2, self._max_interval)
            self._grew.clear()
            if self._done:
                return  # the rest goes with the reply
            self._text = self._text_so_far()
            room = min(self._max_batch_bytes, self._max_bytes - self._sent_bytes)
            new = utf8_prefix(self._text[self._sent :], room)
            if not new:
                if room < 4:  # the call's streaming is spent: the reply brings the rest
                    return
                continue
            if len(new) < len(self._text) - self._sent:
                self._grew.set()  # more is waiting: the next batch takes it
            delta = StreamDelta(message_id=self._message_id, sequence=self._batches + 1, text=new)
            last_sent = clock()
            try:
                await self._send(delta)
            except Exception as err:  # the reply still carries all its text
                log.warning("streaming %s stopped: %s", self._message_id, err)
                return
            self._batches += 1
            self._sent += len(new)
            self._sent_bytes += utf8_size(new)
