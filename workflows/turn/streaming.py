"""The reply in flight: a model call's text, streamed into the event log as it comes.
Workflow side (deterministic).

``call_model`` sends its reply's text to its own workflow in batches (the
``stream_delta`` signal, about one per 100 ms while text comes); each batch becomes an
AG-UI ``TEXT_MESSAGE_CONTENT`` in the event log, where followers (the gateway's SSE,
``/agui``, the CLI, the page) read it by offset. When the call's reply arrives, the
text not yet streamed follows and the message ends: the deltas of a message always add
up to its durable text in the transcript.

Each attempt of the activity streams under the message id its reply will have. When an
attempt fails and Temporal retries it, the first attempt's message ends with a
``CUSTOM`` event ``parley.stream_discarded`` naming it, and the next attempt streams
under a new id: text of two attempts is never interleaved in one message. A batch that
comes after its call ended (an attempt that outlived its timeout) is ignored, and so is
one past what a call may stream (``parley.contracts.limits``: a batch over
``STREAM_BATCH_MAX_BYTES``, past ``STREAM_BATCHES_PER_CALL`` or past
``STREAM_BYTES_PER_CALL`` in all, which ``call_model`` never sends): its message takes
no more batches, and the reply brings the rest of its text.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from langchain_core.messages import AIMessage

    from parley.contracts import StreamDelta, text_of
    from parley.contracts.limits import (
        STREAM_BATCH_MAX_BYTES,
        STREAM_BATCHES_PER_CALL,
        STREAM_BYTES_PER_CALL,
        utf8_size,
    )
    from parley.workflows.record.events import EventLog

#: Why a streamed message was dropped (the ``reason`` of ``parley.stream_discarded``).
RETRIED = "the model call was retried; its reply follows as a new message"
FAILED = "the model call failed"
INTERRUPTED = "a new message interrupted the model call; the reply follows as a new message"


class ReplyStream:
    """The one owner of the streamed messages of the model call in flight."""

    def __init__(self, events: EventLog) -> None:
        self._events = events
        self._calling = False
        #: Streamed messages not yet ended: message id -> (batches seen, chars streamed).
        self._open: dict[str, tuple[int, int]] = {}
        #: Bytes each open message streamed; messages that take no more batches.
        self._bytes: dict[str, int] = {}
        self._stopped: set[str] = set()
        self._ended: set[str] = set()

    def begin(self) -> None:
        """A model call starts: its batches are taken from now until it ends."""
        self._calling = True

    def add(self, delta: StreamDelta) -> None:
        """A batch from ``call_model`` (the signal). Batches arrive in the order sent;
        a repeated one (a resent signal) is taken once."""
        if not self._calling or delta.message_id in self._ended:
            workflow.logger.info("ignored a stream batch of %s: its call ended", delta.message_id)
            return
        seen, streamed = self._open.get(delta.message_id, (0, 0))
        if delta.sequence <= seen or delta.message_id in self._stopped:
            return
        size = utf8_size(delta.text)
        total = self._bytes.get(delta.message_id, 0) + size
        if (
            size > STREAM_BATCH_MAX_BYTES
            or total > STREAM_BYTES_PER_CALL
            or delta.sequence > STREAM_BATCHES_PER_CALL
        ):
            workflow.logger.warning(
                "refused stream batch %d of %s (%d bytes, %d in all): past what a call "
                "may stream; its reply brings the rest",
                delta.sequence,
                delta.message_id,
                size,
                total,
            )
            self._stopped.add(delta.message_id)
            return
        self._bytes[delta.message_id] = total
        if not seen:
            self._discard_others(keep=delta.message_id, reason=RETRIED)
            self._events.text_start(delta.message_id)
        if delta.text:
            self._events.text_content(delta.message_id, delta.text)
        self._open[delta.message_id] = (delta.sequence, streamed + len(delta.text))

    def finish(self, reply: AIMessage, message_id: str) -> None:
        """The call's reply came: the rest of its text, then the message's end. A reply
        that streamed nothing is sent whole (when it has text)."""
        self._calling = False
        self._discard_others(keep=message_id, reason=RETRIED)
        text = text_of(reply)
        self._bytes.pop(message_id, None)
        if message_id in self._open:
            _, streamed = self._open.pop(message_id)
            if text[streamed:]:
                self._events.text_content(message_id, text[streamed:])
            self._events.text_end(message_id)
            self._ended.add(message_id)
        elif text:
            self._events.text_message(message_id, text)
            self._ended.add(message_id)

    def fail(self, reason: str = FAILED) -> None:
        """The call failed for good, or was cancelled (``INTERRUPTED``): what it
        streamed is withdrawn."""
        self._calling = False
        self._discard_others(keep=None, reason=reason)

    def _discard_others(self, *, keep: str | None, reason: str) -> None:
        for message_id in [m for m in self._open if m != keep]:
            del self._open[message_id]
            self._bytes.pop(message_id, None)
            self._events.text_end(message_id)
            self._events.stream_discarded(message_id, reason)
            self._ended.add(message_id)
