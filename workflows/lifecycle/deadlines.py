"""Deadlines of the pending calls: the earliest one (the run loop's timer) and what
happens when calls pass theirs. Workflow side (deterministic: ``workflow.now()``).

A call past its deadline is escalated once if its rule says so (its ``escalate_to``
told, its wait extended), else answered by a turn: expired, or rejected if its rule
says so, and the model goes on. A subagent keeps its own deadlines and reports them;
its parent never expires them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

from parley.contracts import PendingCall
from parley.workflows.context import Records, View
from parley.workflows.record.publishing import publish_status
from parley.workflows.rules import gate
from parley.workflows.turn.turns import TurnEngine, TurnJobs


class Deadlines:
    def __init__(self, view: View, records: Records, turns: TurnEngine, jobs: TurnJobs) -> None:
        self._state, self._start, self._turns = view.state, view.start, turns
        self._ledger, self._pending = records.ledger, records.pending
        self._notifier, self._subagents = jobs.notifier, jobs.subagents

    def own_pending(self) -> list[PendingCall]:
        """The pending calls whose deadlines this conversation keeps."""
        return self._pending.own()

    def expired(self) -> list[PendingCall]:
        return gate.expired_calls(self.own_pending(), workflow.now())

    def next(self) -> datetime | None:
        return min((call.expires_at for call in self.own_pending()), default=None)

    def time_to_next(self) -> timedelta | None:
        earliest = self.next()
        if earliest is None:
            return None
        return max(earliest - workflow.now(), timedelta(seconds=1))

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
