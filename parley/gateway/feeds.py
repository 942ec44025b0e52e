"""One subscription per conversation, shared by every stream that follows it. Client
side (the gateway).

A browser tab, an AG-UI client or a ``curl`` that follows a conversation does not call
Temporal's ``wait_for_events`` itself: a workflow admits about ten updates in flight,
so a dozen direct followers would lock out a decision. The gateway keeps one
:class:`Feed` per conversation: one task that waits (``Conversations.wait_for_events``)
and wakes its followers when the conversation has new events; each follower then reads
them with the ``events`` query from its own offset. A feed with no follower stops after
``IDLE_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from parley.client import ConversationRefused, Conversations
from parley.errors import ErrorType

log = logging.getLogger("parley.gateway")

#: How long a feed outlives its last follower (a page reload reuses it).
IDLE_SECONDS = 30.0
#: Pause before waiting again after a refused or failed wait (a run handing over).
RETRY_SECONDS = 0.5


class Feed:
    """The latest event offset of one conversation, and a way to wait for a newer one."""

    def __init__(self, conversations: Conversations, session_id: str, user_id: str) -> None:
        self._conversations = conversations
        self.session_id = session_id
        self.user_id = user_id
        #: The latest offset seen (-1: none yet).
        self.latest = -1
        #: True once the conversation's workflow has closed.
        self.closed = False
        self._changed = asyncio.Event()
        self.followers = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, after: int) -> None:
        self.latest = max(self.latest, after)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._follow(), name=f"feed-{self.session_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def wait_beyond(self, after: int, seconds: float) -> bool:
        """Wait until the conversation has an event after ``after`` or has closed, at
        most ``seconds``; return whether it has."""
        deadline = asyncio.get_running_loop().time() + seconds
        while self.latest <= after and not self.closed:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=left)
        return True

    def _wake(self) -> None:
        self._changed.set()

    async def _follow(self) -> None:
        while not self.closed:
            try:
                latest = await self._conversations.wait_for_events(
                    self.session_id, self.user_id, self.latest
                )
            except ConversationRefused as refusal:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # stopped, not refused
                if refusal.error_type == ErrorType.CONVERSATION_ENDED:
                    self.closed = True
                    self._wake()
                    return
                if refusal.error_type not in (ErrorType.HANDING_OVER, ErrorType.NOT_FOUND):
                    log.warning("following %s: %s", self.session_id, refusal)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            except Exception:  # the gateway lives on; followers keep their offsets
                log.exception("following %s failed; retrying", self.session_id)
                await asyncio.sleep(RETRY_SECONDS * 4)
                continue
            if latest > self.latest:
                self.latest = latest
                self._wake()


class Feeds:
    """The gateway's feeds, one per conversation."""

    def __init__(self, conversations: Conversations, idle_seconds: float = IDLE_SECONDS) -> None:
        self._conversations = conversations
        self._feeds: dict[str, Feed] = {}
        self._idle_seconds = idle_seconds
        self._reapers: dict[str, asyncio.TimerHandle] = {}

    @contextlib.asynccontextmanager
    async def follow(self, session_id: str, user_id: str, after: int) -> AsyncIterator[Feed]:
        """The conversation's feed, for as long as the caller follows it. The caller has
        checked that ``user_id`` owns the conversation."""
        feed = self._feeds.get(session_id)
        if feed is None or feed.user_id != user_id:
            feed = Feed(self._conversations, session_id, user_id)
            self._feeds[session_id] = feed
        reaper = self._reapers.pop(session_id, None)
        if reaper is not None:
            reaper.cancel()
        feed.followers += 1
        feed.start(after)
        try:
            yield feed
        finally:
            feed.followers -= 1
            if feed.followers == 0:
                self._reapers[session_id] = asyncio.get_running_loop().call_later(
                    self._idle_seconds, lambda: asyncio.ensure_future(self._reap(session_id))
                )

    async def _reap(self, session_id: str) -> None:
        self._reapers.pop(session_id, None)
        feed = self._feeds.get(session_id)
        if feed is not None and feed.followers == 0:
            del self._feeds[session_id]
            await feed.stop()

    def __len__(self) -> int:
        return len(self._feeds)

    async def aclose(self) -> None:
        for reaper in self._reapers.values():
            reaper.cancel()
        self._reapers.clear()
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
