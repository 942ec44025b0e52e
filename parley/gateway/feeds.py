"""One subscription per conversation, shared by every stream that follows it, whoever
follows. Client side (the gateway).

A browser tab, an AG-UI client or a ``curl`` that follows a conversation does not call
Temporal's ``wait_for_events`` itself: each call is an update, a workflow admits about
ten in flight and a run about 2,000 in all. The gateway keeps one :class:`Feed` per
conversation, shared by the owner's and the reviewers' streams alike: one task that
waits (``Conversations.wait_for_events``) and wakes its followers when the conversation
has new events; each follower then reads them with the ``events`` query, as its own
user (the access check stays per follower), from its own offset. The shared wait is
one follower's, with that follower's verified groups (a member of a reviewer group).
The feed stops when its last follower leaves.

The feed only ever waits beyond an offset the workflow itself reported (an ``events``
page's ``latest`` or a wait's answer), never beyond one a client sent: a client's
``after`` is bounded by the latest offset before it follows (``streams``), so no
follower can make the feed, or the others, wait for an event that will never come.
A wait that comes back with nothing new (the workflow let it go for a newer waiter, or
the run handed over) is retried after a pause that grows while it repeats, so waiters
that evict one another can never loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from parley.client import ConversationRefused, Conversations
from parley.contracts.errors import ErrorType

log = logging.getLogger("parley.gateway")

#: Pause before waiting again after a refused or failed wait (a run handing over).
RETRY_SECONDS = 0.5
#: Pauses while the conversation does not exist yet (a stream opened beside the request
#: that starts it): from the first to the longest. Its first events come within one of
#: them of its start.
NOT_FOUND_PAUSE_SECONDS = (0.02, 0.5)
#: Pauses after a wait that came back with nothing new: from the first to the longest.
RELEASED_PAUSE_SECONDS = (0.1, 5.0)


class Feed:
    """The latest event offset of one conversation, and a way to wait for a newer one."""

    def __init__(self, conversations: Conversations, session_id: str) -> None:
        self._conversations = conversations
        self.session_id = session_id
        #: The latest offset the workflow reported (-1: none yet).
        self.latest = -1
        #: True once the conversation's workflow has closed.
        self.closed = False
        self._changed = asyncio.Event()
        #: Following users and how many streams each has open.
        self.followers: Counter[str] = Counter()
        #: Each following user's verified groups, as they last joined.
        self._groups: dict[str, Sequence[str]] = {}
        #: The user whose access the shared wait uses (one of the followers).
        self._waiting_as: str | None = None
        self._task: asyncio.Task[None] | None = None

    def join(self, user_id: str, latest: int, groups: Sequence[str] = ()) -> None:
        """A follower arrives; ``latest`` is the latest offset as the workflow reported
        it to this follower (with their ``groups``) just now."""
        self.followers[user_id] += 1
        self._groups[user_id] = tuple(groups)
        self.note(latest)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._follow(), name=f"feed-{self.session_id}")

    def leave(self, user_id: str) -> None:
        self.followers[user_id] -= 1
        if self.followers[user_id] <= 0:
            del self.followers[user_id]
            self._groups.pop(user_id, None)

    def note(self, latest: int) -> None:
        """The workflow reported ``latest``: wake the followers if it is news."""
        if latest > self.latest:
            self.latest = latest
            self._changed.set()

    def cancel(self) -> None:
        """Stop waiting (the last follower left). Its wait, already in the workflow,
        stays there until an event comes or a newer waiter lets it go."""
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        self.cancel()
        if self._task is not None:
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

    def _wait_user(self) -> str | None:
        """Whose access the next wait uses: the same follower while it follows."""
        if self._waiting_as not in self.followers:
            self._waiting_as = next(iter(self.followers), None)
        return self._waiting_as

    def _next_wait_user(self) -> None:
        """The current one was refused: let the next wait use another follower."""
        users = list(self.followers)
        if self._waiting_as in users and len(users) > 1:
            self._waiting_as = users[(users.index(self._waiting_as) + 1) % len(users)]

    async def _ended(self, user_id: str) -> bool:
        """Whether the conversation has really ended: closing the feed ends every
        follower's stream, so a refusal that raced the conversation's start (Temporal
        says NOT_FOUND before it exists) must not close it. Temporal says for sure
        (a terminated workflow's query still answers, from its last state)."""
        if await self._conversations.closed(self.session_id):
            return True
        try:
            groups = self._groups.get(user_id, ())
            await self._conversations.events(self.session_id, user_id, limit=1, groups=groups)
        except ConversationRefused as refusal:
            return refusal.error_type == ErrorType.CONVERSATION_ENDED
        return False

    async def _follow(self) -> None:
        pause = RELEASED_PAUSE_SECONDS[0]
        not_found_pause = NOT_FOUND_PAUSE_SECONDS[0]
        while not self.closed:
            user_id = self._wait_user()
            if user_id is None:
                return
            after = self.latest
            try:
                latest = await self._conversations.wait_for_events(
                    self.session_id, user_id, after, self._groups.get(user_id, ())
                )
            except ConversationRefused as refusal:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError from None  # stopped, not refused
                if refusal.error_type == ErrorType.CONVERSATION_ENDED and await self._ended(
                    user_id
                ):
                    self.closed = True
                    self._changed.set()
                    return
                if refusal.error_type == ErrorType.NOT_FOUND:  # not started yet
                    await asyncio.sleep(not_found_pause)
                    not_found_pause = min(not_found_pause * 2, NOT_FOUND_PAUSE_SECONDS[1])
                    continue
                if refusal.error_type == ErrorType.NOT_OWNER:
                    self._next_wait_user()
                elif refusal.error_type != ErrorType.HANDING_OVER:
                    log.warning("following %s: %s", self.session_id, refusal)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            except Exception:  # the gateway lives on; followers keep their offsets
                log.exception("following %s failed; retrying", self.session_id)
                await asyncio.sleep(RETRY_SECONDS * 4)
                continue
            not_found_pause = NOT_FOUND_PAUSE_SECONDS[0]
            if latest > after:
                pause = RELEASED_PAUSE_SECONDS[0]
                self.note(latest)
            else:
                # Let go with nothing new: a newer waiter (another gateway) or a run
                # handing over. Waiting again at once could evict that waiter in turn.
                await asyncio.sleep(pause)
                pause = min(pause * 2, RELEASED_PAUSE_SECONDS[1])


class Feeds:
    """The gateway's feeds, one per conversation, each while it has followers."""

    def __init__(self, conversations: Conversations) -> None:
        self._conversations = conversations
        self._feeds: dict[str, Feed] = {}

    @contextlib.asynccontextmanager
    async def follow(
        self, session_id: str, user_id: str, latest: int, groups: Sequence[str] = ()
    ) -> AsyncIterator[Feed]:
        """The conversation's feed, for as long as the caller follows it. The caller has
        checked that ``user_id`` (with their verified ``groups``) may read the
        conversation, and read its latest offset ``latest`` (-1 if it has none yet) from
        the workflow."""
        feed = self._feeds.get(session_id)
        if feed is None:
            feed = self._feeds[session_id] = Feed(self._conversations, session_id)
        feed.join(user_id, latest, groups)
        try:
            yield feed
        finally:
            feed.leave(user_id)
            if not feed.followers and self._feeds.get(session_id) is feed:
                # Out of the table at once: a follower arriving while it stops gets a
                # new feed, never one that is stopping.
                del self._feeds[session_id]
                feed.cancel()

    def get(self, session_id: str) -> Feed | None:
        return self._feeds.get(session_id)

    def __len__(self) -> int:
        return len(self._feeds)

    async def aclose(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
