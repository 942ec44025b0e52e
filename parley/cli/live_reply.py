"""The reply as it streams, for the command line and ``parley chat``. Client side.

``send_following`` follows the conversation's event log (its ``wait_for_events`` update
and ``events`` query, as the gateway's SSE does) while a message's or a decision's turn
runs, and ``LiveReply`` writes each ``TEXT_MESSAGE_CONTENT`` delta as it comes. A
streamed message whose model call was retried or cancelled ends with
``parley.stream_discarded``: its partial text stays on screen (a terminal cannot take it
back), followed by a line saying it was discarded, and the retry streams anew. The
turn's result is printed afterwards as always (``parley.cli.rendering``); its reply is not
printed a second time when it was streamed whole.

No wait is cancelled while Temporal is still loading the conversation: the server logs
that as an error (a "context canceled" line in ``parley dev``'s console). Having read a
turn's end, the follower pauses before it waits again (the turn's update answers
meanwhile); once the update has answered it sends no further wait; the one in flight is
let come back on its own if the log already holds an event past it (it does at once),
and a wait no event will answer is cancelled only once it is a second old.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from parley.client import ConversationRefused, Conversations
from parley.contracts import TurnResult
from parley.contracts.errors import ErrorType
from parley.contracts.names import INTERRUPTED_EVENT, STREAM_DISCARDED_EVENT

#: How long the follower waits before looking again for a conversation this message
#: is starting (it does not exist until the send's update-with-start lands).
NOT_STARTED_RETRY_SECONDS = 0.05
#: How long the log's latest offset may take to read before the send goes on without
#: following (a live worker answers a query at once).
OFFSET_WAIT_SECONDS = 3.0
#: After the turn's update answered, how long the follower has to finish on its own (a
#: wait with events past it comes back at once) before it is cancelled.
FOLLOWER_GRACE_SECONDS = 3.0
#: The events that end a turn. Having read one, the follower pauses this long before it
#: waits again: the turn's update answers meanwhile (when the turn was this send's), and
#: no wait is sent that would only have to be cancelled.
TURN_ENDS = ("RUN_FINISHED", "RUN_ERROR")
TURN_END_PAUSE_SECONDS = 0.5
#: A wait no event will answer is cancelled once it has been in flight this long, not
#: sooner: Temporal has loaded the conversation by then, and logs no error for it.
YOUNGEST_CANCEL_SECONDS = 1.0
#: The run ids a command gives its messages: ``cli-`` and 64 random bits.
RUN_ID_PREFIX = "cli-"


def new_run_id() -> str:
    """A run id for a message this client sends (so its events can be told apart)."""
    return f"{RUN_ID_PREFIX}{uuid.uuid4().hex[:16]}"


class OwnRun:
    """Which events of the log belong to one request's run: those of the run named
    ``run_id`` (or, with none, of the first run that starts), or those after a
    ``parley.interrupted`` naming ``message_id``, up to the run's end."""

    def __init__(self, run_id: str | None = None, message_id: str | None = None) -> None:
        self._run_id = run_id
        self._message_id = message_id
        self.inside = False
        #: The run came to its end (or rest): nothing after it is this request's.
        self.ended = False

    def take(self, event: dict[str, Any]) -> bool:
        """Whether ``event`` is of this request's run."""
        if self.ended:
            return False
        kind = event.get("type")
        if not self.inside:
            if kind == "RUN_STARTED":
                self.inside = self._run_id is None or event.get("runId") == self._run_id
            elif kind == "CUSTOM" and event.get("name") == INTERRUPTED_EVENT:
                ids = (event.get("value") or {}).get("messageIds") or []
                self.inside = self._message_id is not None and self._message_id in ids
            return self.inside
        if kind in TURN_ENDS:
            self.inside, self.ended = False, True
        return True


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
        elif kind == "CUSTOM" and event.get("name") == STREAM_DISCARDED_EVENT:
            value = event.get("value") or {}
            discarded = value.get("messageId")
            if discarded in self._texts:
                del self._texts[discarded]
                if self._open == discarded:
                    self._end_line()
                self._write(f"[discarded: {value.get('reason', 'the model call failed')}]\n")

    def finish_line(self) -> None:
        """End the line a streamed message left open (before a line of another kind)."""
        if self._open is not None:
            self._end_line()

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
    *,
    own: OwnRun | None = None,
) -> TurnResult:
    """``send()`` (the message's update), while the events of its run go to ``live`` as
    they come: ``own`` names the run (the run id ``send`` gives its message, and the
    message's id); without it, the first run that starts is the request's. That run's
    events up to its end are all fed before this returns. Cancelled (Ctrl-C), or with
    Temporal gone, it stops following at once."""
    try:
        async with asyncio.timeout(OFFSET_WAIT_SECONDS):
            after = await _latest_offset(conversations, session_id, user_id)
    except (TimeoutError, ConversationRefused):
        # No worker answers now: the send alone says what happens, as without streaming.
        return await send()
    follower = _Follower(conversations, session_id, user_id, after, live, own or OwnRun())
    task = asyncio.create_task(follower.run())
    try:
        result = await send()
    except asyncio.CancelledError:
        task.cancel()  # the user stops the command: no wait for Temporal's answers
        raise
    except ConversationRefused as refused:
        if refused.error_type == ErrorType.UNREACHABLE:
            task.cancel()  # Temporal went away: there is no wait to let come back
        else:
            await follower.stop(task)
        raise
    except BaseException:
        await follower.stop(task)
        raise
    await follower.stop(task)
    with contextlib.suppress(ConversationRefused):
        await follower.read_on()
    return result


async def _latest_offset(conversations: Conversations, session_id: str, user_id: str) -> int:
    try:
        return (await conversations.events(session_id, user_id, limit=1)).latest
    except ConversationRefused as refused:
        if refused.error_type == ErrorType.NOT_FOUND:
            return -1  # this message starts the conversation
        raise


class _Follower:
    """Waits for events past ``position`` and feeds them, until stopped."""

    def __init__(
        self,
        conversations: Conversations,
        session_id: str,
        user_id: str,
        after: int,
        live: LiveReply,
        own: OwnRun,
    ) -> None:
        self._conversations = conversations
        self._session_id = session_id
        self._user_id = user_id
        self._live = live
        self._own = own
        #: The offset of the last event read.
        self.position = after
        self._stopping = asyncio.Event()
        #: The wait in flight, if one is: its ``after`` and when it was sent.
        self._waiting: tuple[int, float] | None = None

    async def run(self) -> None:
        while not self._stopping.is_set():
            self._waiting = (self.position, time.monotonic())
            try:
                await self._conversations.wait_for_events(
                    self._session_id, self._user_id, self.position
                )
            except ConversationRefused as refused:
                if refused.error_type != ErrorType.NOT_FOUND:
                    return  # the result will say what went wrong
                await asyncio.sleep(NOT_STARTED_RETRY_SECONDS)
                continue
            finally:
                self._waiting = None
            await self.read_on()
            if self._own.ended:
                # The turn's update answers about now: no wait is sent if it does.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), TURN_END_PAUSE_SECONDS)

    async def read_on(self) -> None:
        """Read the events past ``position`` up to the latest; feed those of this
        request's run."""
        while True:
            page = await self._conversations.events(
                self._session_id, self._user_id, after=self.position
            )
            for item in page.events:
                if self._own.take(item.event):
                    self._live.feed(item.event)
            if page.next_after == self.position:
                return
            self.position = page.next_after
            if page.next_after >= page.latest:
                return

    async def stop(self, task: asyncio.Task[None]) -> None:
        """No further wait. The one in flight comes back on its own when an event is
        past it; else it is cancelled, once Temporal has had time to take it. Anything
        that outlasts the grace is cancelled."""
        self._stopping.set()
        waiting = self._waiting  # the wait may come back while the log is read
        if waiting is not None and not await self._answered_soon(waiting[0]):
            age = time.monotonic() - waiting[1]
            await asyncio.wait({task}, timeout=max(0.0, YOUNGEST_CANCEL_SECONDS - age))
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=FOLLOWER_GRACE_SECONDS)
        if not done:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConversationRefused):
            await task

    async def _answered_soon(self, waiting_after: int) -> bool:
        """Whether the log already holds an event past ``waiting_after``."""
        try:
            async with asyncio.timeout(OFFSET_WAIT_SECONDS):
                latest = await _latest_offset(self._conversations, self._session_id, self._user_id)
        except (TimeoutError, ConversationRefused):
            return False
        return latest > waiting_after
