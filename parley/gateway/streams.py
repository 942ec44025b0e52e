"""Event streams: a turn's AG-UI events as it runs, a conversation's events from an
offset on, and both as Server-Sent Events. Client side (the gateway).

A stream's ``id:`` is the event's offset in the conversation's log, so a client
resumes with ``Last-Event-ID``. Streams wait on the conversation's shared feed
(``feeds``), never on a poll loop, and read with the ``events`` query from their own
offset, as their caller with their verified ``groups`` (a member of a reviewer
``group:<name>`` reads as that reviewer).

A stopping gateway drains (``Drain``, begun by ``server``): a stream that follows a
conversation ends at once, a turn's stream when its run ends (or at the cut, shortly
before the grace period runs out), each with a reconnectable end (``reconnect_end``):
an SSE comment that says so, ``retry:``, and the last event id again, so a client
resumes on another replica from its ``Last-Event-ID``, with no gap and no repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from ag_ui.core import Event, RunErrorEvent
from ag_ui.encoder import EventEncoder
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import TypeAdapter
from starlette.types import Receive, Scope, Send

from parley.client import ConversationRefused
from parley.contracts import OffsetEvent, TurnResult
from parley.contracts.errors import ErrorType
from parley.gateway.deps import Gateway, guarded
from parley.gateway.errors import refused
from parley.gateway.replay import run_events

AG_UI_EVENT: TypeAdapter[Any] = TypeAdapter(Event)
#: A comment line every this many seconds keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0

#: How soon an EventSource reconnects to a stream the gateway ended as it stopped.
RECONNECT_MILLISECONDS = 1000

#: A stream's items: (offset, event); offset None for events outside the log. An empty
#: event is a keepalive (offset None), or where the stream stands (an offset: nothing
#: is sent, but a reconnectable end names it).
StreamItem = tuple[int | None, dict[str, Any]]
StreamItems = AsyncIterator[StreamItem]


async def respond_to_turn(
    gateway: Gateway,
    request: Request,
    session_id: str,
    user_id: str,
    call: Callable[[], Awaitable[TurnResult]],
    groups: Sequence[str] = (),
) -> Any:
    if "text/event-stream" in request.headers.get("accept", ""):
        return await turn_stream(gateway, session_id, user_id, call, groups=groups)
    result = await guarded(session_id, call())
    return JSONResponse(result.model_dump(mode="json"))


async def turn_stream(
    gateway: Gateway,
    session_id: str,
    user_id: str,
    call: Callable[[], Awaitable[TurnResult]],
    run_id: str | None = None,
    groups: Sequence[str] = (),
    mark: Callable[[StreamItems], StreamItems] | None = None,
) -> StreamingResponse:
    """The turn's events as Server-Sent Events. A refused request answers its HTTP
    error (404 another user's conversation, 409 not now, 422 an invalid decision...)
    before the stream, and its 200, begin: the stream starts with the run's first
    event, once the conversation has taken the request. ``mark``: what passes the
    events on (AG-UI's marks each result revertible or not, ``agui_reverts``)."""
    cursor = await current_offset(gateway, session_id, user_id, groups)
    events = turn_events(gateway, session_id, user_id, call, cursor, run_id, groups)
    if mark is not None:
        events = mark(events)
    try:
        first = await anext(events)
    except StopAsyncIteration:
        return sse(events, bounded=True)
    return sse(_starting_with(first, events), bounded=True)


async def _starting_with(first: StreamItem, rest: StreamItems) -> StreamItems:
    yield first
    async for item in rest:
        yield item


async def current_offset(
    gateway: Gateway, session_id: str, user_id: str, groups: Sequence[str] = ()
) -> int:
    """The latest event offset; -1 for a conversation that does not exist yet."""
    try:
        page = await gateway.conversations.events(session_id, user_id, limit=1, groups=groups)
    except ConversationRefused as refusal:
        if refusal.error_type == ErrorType.NOT_FOUND:
            return -1
        raise refused(refusal, session_id) from None
    return page.latest


async def read_after(
    gateway: Gateway, session_id: str, user_id: str, after: int, groups: Sequence[str] = ()
) -> list[OffsetEvent]:
    """The events after ``after``; none while the conversation does not exist yet."""
    try:
        return await _events_after(gateway, session_id, user_id, after, groups)
    except ConversationRefused as refusal:
        if refusal.error_type != ErrorType.CONVERSATION_ENDED:
            raise
    # A read that raced the conversation's start can be told "ended" (Temporal says
    # NOT_FOUND before it exists); a second read says for sure.
    return await _events_after(gateway, session_id, user_id, after, groups)


async def _events_after(
    gateway: Gateway, session_id: str, user_id: str, after: int, groups: Sequence[str]
) -> list[OffsetEvent]:
    conversations = gateway.conversations
    try:
        return (await conversations.events(session_id, user_id, after=after, groups=groups)).events
    except ConversationRefused as refusal:
        if refusal.error_type == ErrorType.NOT_FOUND:
            return []
        raise


async def turn_events(
    gateway: Gateway,
    session_id: str,
    user_id: str,
    call: Callable[[], Awaitable[TurnResult]],
    cursor: int,
    run_id: str | None = None,
    groups: Sequence[str] = (),
) -> StreamItems:
    """The events of the turn ``call`` runs, after ``cursor`` (the latest offset
    before it), as they happen. A refusal before the run's first event raises its
    ``ApiError`` (``turn_stream`` answers it before the stream starts); one after it
    ends the stream with ``RUN_ERROR``. With ``run_id`` (AG-UI), runs carry the
    caller's id.

    A retried request (the same message id, the same decisions) runs nothing again:
    its answer is the first one's, and no ``RUN_STARTED`` follows ``cursor`` (or the
    stream joined that run half-way). Then the run that answered it is replayed from
    the event log (``replay``), so every request gets a whole run. So does a message
    that waited for a turn (``while_busy``): a run that ends before one starts after
    ``cursor`` was in flight when it came, and the run that answers it is known only
    from its result. A stream carries one run: a next one (a queued message's) is not
    its own."""
    turn = asyncio.ensure_future(call())
    started = False  # a RUN_STARTED after ``cursor`` was streamed
    ended = False  # a run ended after ``cursor``: the streamed one, or one in flight
    try:
        async with gateway.feeds.follow(session_id, user_id, cursor, groups) as feed:
            while not (ended and started):
                finished = turn.done()
                for item in await read_after(gateway, session_id, user_id, cursor, groups):
                    cursor = item.offset
                    if ended:
                        continue
                    kind = item.event.get("type")
                    started = started or kind == "RUN_STARTED"
                    if started:
                        yield item.offset, with_run_id(item.event, run_id)
                    ended = kind in ("RUN_FINISHED", "RUN_ERROR")
                if finished:
                    break
                waiting = asyncio.ensure_future(feed.wait_beyond(cursor, KEEPALIVE_SECONDS))
                await asyncio.wait({turn, waiting}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
        result = await turn
        if not started:
            replayed = await run_events(gateway.conversations, session_id, user_id, result, groups)
            for offset, event in replayed:
                yield offset, with_run_id(event, run_id)
    except ConversationRefused as refusal:
        error = refused(refusal, session_id)
        if not started:
            raise error from None
        yield (
            None,
            RunErrorEvent(message=error.message, code=error.error_type).model_dump(
                mode="json", by_alias=True, exclude_none=True
            ),
        )
    finally:
        if not turn.done():
            turn.cancel()


async def follow(
    gateway: Gateway,
    session_id: str,
    user_id: str,
    after: int,
    latest: int,
    groups: Sequence[str] = (),
) -> StreamItems:
    """Every event after ``after``, then new ones as they come, until the
    conversation's workflow closes. Empty events are keepalives. ``latest`` is the
    latest offset the workflow reported to this user just now: an ``after`` beyond it
    is read as ``latest`` (only new events), never waited for."""
    cursor = min(after, latest)
    if cursor >= 0:
        yield cursor, {}  # where it stands: a reconnect resumes here
    async with gateway.feeds.follow(session_id, user_id, latest, groups) as feed:
        while True:
            try:
                page = await read_after(gateway, session_id, user_id, cursor, groups)
            except ConversationRefused:
                return
            for item in page:
                cursor = item.offset
                yield item.offset, item.event
            if feed.closed and not page:
                return
            if not await feed.wait_beyond(cursor, KEEPALIVE_SECONDS):
                yield None, {}


def sse(events: StreamItems, *, bounded: bool = False) -> StreamingResponse:
    """``events`` as Server-Sent Events. ``bounded``: a turn's stream, which ends when
    its run does (a drain lets it); otherwise a stream that follows (a drain ends it)."""
    return EventStream(events, bounded=bounded)


class Drain:
    """A stopping gateway's streams: once it has begun, every stream that follows a
    conversation ends with its reconnectable end; a turn's stream does at the cut (or
    when its run ends first)."""

    def __init__(self) -> None:
        self.began = asyncio.Event()
        self.cut = asyncio.Event()

    def begin(self, cut_after: float) -> None:
        """Stop: the cut comes ``cut_after`` seconds later."""
        if not self.began.is_set():
            self.began.set()
            asyncio.get_running_loop().call_later(cut_after, self.cut.set)

    @property
    def draining(self) -> bool:
        return self.began.is_set()


def reconnect_end(last_id: int | None) -> str:
    """The end of a stream the gateway closes as it stops: a comment saying so, how
    soon to reconnect, and the last event id again (an ``id:`` with no ``data:``
    dispatches nothing: an EventSource keeps it, and sends it as ``Last-Event-ID``)."""
    if last_id is None or last_id < 0:
        return f": reconnect: the gateway is stopping\nretry: {RECONNECT_MILLISECONDS}\n\n"
    return (
        f": reconnect: the gateway is stopping; resume with Last-Event-ID: {last_id}\n"
        f"retry: {RECONNECT_MILLISECONDS}\nid: {last_id}\n\n"
    )


class EventStream(StreamingResponse):
    """An SSE response that ends with ``reconnect_end`` when its app (``app.state.drain``)
    drains: at once for a stream that follows, at the cut for a bounded one."""

    def __init__(self, items: StreamItems, *, bounded: bool) -> None:
        self._items = items
        self._bounded = bounded
        self._until: asyncio.Event | None = None
        self._encoder = EventEncoder()
        super().__init__(
            self._body(),
            media_type=self._encoder.get_content_type(),
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        drain = getattr(getattr(scope.get("app"), "state", None), "drain", None)
        if isinstance(drain, Drain):
            self._until = drain.cut if self._bounded else drain.began
        await super().__call__(scope, receive, send)

    async def _body(self) -> AsyncIterator[str]:
        last: int | None = None  # the last offset the client has (or the start's)
        step: asyncio.Future[StreamItem] | None = None
        try:
            while True:
                step = asyncio.ensure_future(_next(self._items))
                step.add_done_callback(_retrieved)
                try:
                    stopped = await self._stopped_before(step)
                finally:
                    if not step.done():
                        step.cancel()  # the items end where they stood; nothing is lost
                        await asyncio.wait({step})
                if stopped:
                    yield reconnect_end(last)
                    return
                try:
                    offset, event = step.result()
                except StopAsyncIteration:
                    return
                if not event:
                    if offset is None:
                        yield ": keepalive\n\n"
                    else:
                        last = offset
                    continue
                encoded = self._encoder.encode(AG_UI_EVENT.validate_python(event))
                if offset is not None:
                    last = offset
                yield (f"id: {offset}\n" if offset is not None else "") + encoded
        finally:
            closing = getattr(self._items, "aclose", None)
            if closing is not None and (step is None or step.done()):
                await closing()  # a client that left: the items' own cleanup runs now

    async def _stopped_before(self, step: asyncio.Future[StreamItem]) -> bool:
        """Wait for ``step``; True if the drain says to end first (an item ready as it
        says so is still sent)."""
        if self._until is None:
            await asyncio.wait({step})
            return False
        stopping = asyncio.ensure_future(self._until.wait())
        try:
            await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        return not step.done()


async def _next(items: StreamItems) -> StreamItem:
    return await anext(items)


def _retrieved(step: asyncio.Future[Any]) -> None:
    """A step cancelled as the stream ends may fail meanwhile: its failure is known."""
    if not step.cancelled():
        with contextlib.suppress(BaseException):
            step.exception()


def with_run_id(event: dict[str, Any], run_id: str | None) -> dict[str, Any]:
    """An AG-UI client names its run: give RUN_STARTED/RUN_FINISHED its id."""
    if run_id is not None and event.get("type") in ("RUN_STARTED", "RUN_FINISHED"):
        return {**event, "runId": run_id}
    return event
