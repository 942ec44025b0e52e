"""Deadlines of the pending calls: the earliest one (the run loop's timer) and what
happens when calls pass theirs. Workflow side (deterministic: ``workflow.now()``).

The timer is kept, not cancelled, when the calls it was set for are decided
(:data:`DEADLINE_TIMER_KEPT`): it rings at the deadline it was set for, finds nothing
due, and is set again for the earliest deadline left, if any. A confirmed turn then
starts no timer and cancels none: today's call, pending for 24 hours, is covered by the
timer set for yesterday's; only a deadline earlier than the one set moves it.

A call past its deadline is escalated once if its rule says so (its ``escalate_to``
told, its wait extended), else answered by a turn: expired, or rejected if its rule
says so, and the model goes on. A subagent keeps its own deadlines and reports them;
its parent never expires them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow

from parley.contracts import PendingCall
from parley.workflows.context import Records, View
from parley.workflows.record.publishing import publish_status
from parley.workflows.rules import gate
from parley.workflows.turn.turns import TurnEngine, TurnJobs

#: Before this patch the run loop's wait started a timer for the earliest deadline and
#: cancelled it when the deadline changed: two events and a server timer task per
#: confirmed turn. Histories recorded before it replay the old way.
DEADLINE_TIMER_KEPT = "deadline-timer-kept"


class Deadlines:
    def __init__(self, view: View, records: Records, turns: TurnEngine, jobs: TurnJobs) -> None:
        self._state, self._start, self._turns = view.state, view.start, turns
        self._ledger, self._pending = records.ledger, records.pending
        self._notifier, self._subagents = jobs.notifier, jobs.subagents
        self._timer: asyncio.Future[None] | None = None
        self._timer_at: datetime | None = None

    def set_timer(self) -> None:
        """The kept timer (:data:`DEADLINE_TIMER_KEPT`) rings at the earliest deadline or
        before: set again only when it rang or a deadline came before the one it holds."""
        if self._timer is not None and self._timer.done():
            self._timer = self._timer_at = None  # it rang: its deadline was looked at
        if self.timer_behind():
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = self.next()
            self._timer = asyncio.ensure_future(asyncio.sleep(self._seconds_to_next()))

    def timer_behind(self) -> bool:
        """Whether a deadline comes before the kept timer rings (or none is set)."""
        earliest = self.next()
        return earliest is not None and (self._timer_at is None or earliest < self._timer_at)

    def timer_rang(self) -> bool:
        return self._timer is not None and self._timer.done()

    def own_pending(self) -> list[PendingCall]:
        """The pending calls whose deadlines this conversation keeps."""
        return self._pending.own()

    def expired(self) -> list[PendingCall]:
        return gate.expired_calls(self.own_pending(), workflow.now())

    def next(self) -> datetime | None:
        return min((call.expires_at for call in self.own_pending()), default=None)

    def time_to_next(self) -> timedelta | None:
        if self.next() is None:
            return None
        return timedelta(seconds=self._seconds_to_next())

    def _seconds_to_next(self) -> float:
        earliest = self.next()
        assert earliest is not None
        return max((earliest - workflow.now()).total_seconds(), 1.0)

    async def expire_due(self) -> None:
        """Escalate the due calls whose rule escalates (once); answer the others."""
        due = self.expired()
        escalating = [
            call
            for call in due
            if call.on_timeout is not None
            and call.on_timeout.action == "escalate"
            and not call.on_timeout.escalated
        ]
        for call in escalating:
            assert call.on_timeout is not None
            self._pending.escalate(
                call, workflow.now() + timedelta(seconds=call.on_timeout.seconds)
            )
            self._ledger.audit(
                "escalated",
                "parley",
                call.tool_call_id,
                call.name,
                {"to": call.on_timeout.escalate_to, "until": call.expires_at.isoformat()},
            )
        if escalating:
            self._notifier.escalate(escalating)
            publish_status(self._state)  # the new deadline, in the current details
            if self._start.subagent is not None:
                await self._subagents.report_to_parent()  # the parent shows it
        due = [call for call in due if call not in escalating]
        if not due:
            return
        self._pending.remove(due)
        await self._turns.run(expired=due)
