"""Followers of the event log: the ``wait_for_events`` updates the gateway's feeds hold.
Workflow side (deterministic).

A follower waits until the log has an event after the offset it names (one past the
latest counts as the latest: it waits, never spins), the conversation ends, or it is let
go. At most :data:`EVENT_WAITERS_KEPT` wait at once: a newer one releases the oldest,
so subscribers that went away never pile up against Temporal's limit on updates in
flight, which a decision must never meet. All are let go when the run hands over.
"""

from __future__ import annotations

from temporalio import workflow

from parley.contracts import ConversationState
from parley.workflows.record.events import EventLog

#: How many ``wait_for_events`` calls may wait at once.
EVENT_WAITERS_KEPT = 4


class Followers:
    def __init__(self, state: ConversationState, events: EventLog) -> None:
        self._state = state
        self._events = events
        #: One token per waiting follower, oldest first.
        self._waiters: list[object] = []
        #: Set while this run hands over to the next: new followers are refused.
        self.handing_over = False

    def release_all(self) -> None:
        self._waiters.clear()

    async def wait(self, after: int) -> int:
        """The latest offset, once there is an event after ``after`` (or the end)."""
        after = min(after, self._events.last_offset)
        token = object()
        self._waiters.append(token)
        if len(self._waiters) > EVENT_WAITERS_KEPT:
            self._waiters.pop(0)
        try:
            await workflow.wait_condition(
                lambda: (
                    self._events.last_offset > after
                    or self._state.ended
                    or token not in self._waiters
                )
            )
        finally:
            if token in self._waiters:
                self._waiters.remove(token)
        return self._events.last_offset
