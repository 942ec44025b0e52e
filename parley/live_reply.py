"""The reply as it streams, in the terminal: ``parley send`` and ``parley chat`` follow
the conversation's event log while their message's turn runs and write each
``TEXT_MESSAGE_CONTENT`` delta as it comes. Client side (reads the workflow by its
``wait_for_events`` update and ``events`` query, as the gateway's SSE does).

A streamed message whose model call was retried or cancelled ends with
``parley.stream_discarded``: its partial text stays on screen (a terminal cannot take
it back), followed by a line saying it was discarded, and the retry streams anew. The
turn's result is printed afterwards as always; its reply is not printed a second time
when it was streamed whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from parley.client import ConversationRefused, Conversations
from parley.contracts import TurnResult
from parley.errors import ErrorType

#: The CUSTOM event that withdraws a streamed message (parley.workflows.events).
STREAM_DISCARDED = "parley.stream_discarded"
#: How long the follower waits before looking again for a conversation this message
#: is starting (it does not exist until the send's update-with-start lands).
NOT_STARTED_RETRY_SECONDS = 0.05


class LiveReply:
    """Writes streamed text to ``out`` as its events come; remembers each message's text."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        #: The message whose text is on the current line (not yet ended).
        self._open: str | None = None
        #: Text streamed per message; a discarded message is dropped.
        self._texts: dict[str, str] = {}
        self._ended: set[str] = set()

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        message_id = event.get("messageId")
        if kind == "TEXT_MESSAGE_CONTENT" and isinstance(message_id, str):
            if self._open not in (None, message_id):
                self._end_line()
            self._open = message_id
            self._texts[message_id] = self._texts.get(message_id, "") + event["delta"]
            self._write(event["delta"])
        elif kind == "TEXT_MESSAGE_END" and isinstance(message_id, str):
            self._ended.add(message_id)
            if self._open == message_id:
                self._end_line()
        elif kind == "CUSTOM" and event.get("name") == STREAM_DISCARDED:
            value = event.get("value") or {}
            discarded = value.get("messageId")
            if discarded in self._texts:
                del self._texts[discarded]
                if self._open == discarded:
                    self._end_line()
                self._write(f"[discarded: {value.get('reason', 'the model call failed')}]\n")

    def streamed_whole(self, text: str | None) -> bool:
        """Whether ``text`` was shown whole as one ended streamed message."""
        return bool(text) and any(self._texts.get(message_id) == text for message_id in self._ended)

    def _end_line(self) -> None:
        self._open = None
        self._write("\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


async def send_following(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    send: Callable[[], Awaitable[TurnResult]],
    live: LiveReply,
) -> TurnResult:
    """``send()`` (the message's update), while the conversation's new events go to
    ``live`` as they come; the events up to the turn's end are all fed before this
    returns."""
    after = await _latest_offset(conversations, session_id, user_id)
    position = [after]
    follower = asyncio.create_task(_follow(conversations, session_id, user_id, position, live))
    try:
        result = await send()
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConversationRefused):
            await follower
    with contextlib.suppress(ConversationRefused):
        await _read_on(conversations, session_id, user_id, position, live)
    return result


async def _latest_offset(conversations: Conversations, session_id: str, user_id: str) -> int:
    try:
        return (await conversations.events(session_id, user_id, limit=1)).latest
    except ConversationRefused as refused:
        if refused.error_type == ErrorType.NOT_FOUND:
            return -1  # this message starts the conversation
        raise


async def _follow(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    position: list[int],
    live: LiveReply,
) -> None:
    """Until cancelled: wait for events past ``position[0]`` and feed them."""
    while True:
        try:
            await conversations.wait_for_events(session_id, user_id, position[0])
        except ConversationRefused as refused:
            if refused.error_type != ErrorType.NOT_FOUND:
                return  # the result will say what went wrong
            await asyncio.sleep(NOT_STARTED_RETRY_SECONDS)
            continue
        await _read_on(conversations, session_id, user_id, position, live)


async def _read_on(
    conversations: Conversations,
    session_id: str,
    user_id: str,
    position: list[int],
    live: LiveReply,
) -> None:
    while True:
        page = await conversations.events(session_id, user_id, after=position[0])
        for item in page.events:
            live.feed(item.event)
        if page.next_after == position[0]:
            return
        position[0] = page.next_after
        if page.next_after >= page.latest:
            return
